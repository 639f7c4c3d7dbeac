-- Repo ids and revisions are checked before anything reaches a URL.
local validate = require("obleth.hf.repo_id")

describe("obleth.hf.repo_id", function()
  describe("repo_id", function()
    for _, id in ipairs({
      "Qwen/Qwen2.5-0.5B-Instruct", "meta-llama/Llama-3.1-8B-Instruct", "gpt2", "bert-base-uncased",
      "unsloth/Qwen3-235B-A22B-GGUF", "a/b", "TheBloke/Llama-2-7B-GGUF", "org_1/model.v2_x",
      ("n"):rep(96) .. "/" .. ("m"):rep(96),
    }) do
      it("accepts " .. id:sub(1, 40), function()
        assert.equal(id, (validate.repo_id(id)))
      end)
    end

    for _, case in ipairs({
      { "", "empty" }, { "a/b/c", "one '/'" }, { "datasets/foo/bar", "one '/'" },
      { "https://huggingface.co/gpt2", "not a URL" }, { "http://evil.example/x", "not a URL" },
      { "//evil.example/x", "one '/'" }, { "a%2Fb", "not a URL" }, { "a/b%2e%2e", "not a URL" },
      { "a/b?x=1", "not a URL" }, { "a/b#frag", "not a URL" }, { " a/b", "whitespace" }, { "a/b\n", "whitespace" },
      { "a/b c", "whitespace" }, { "../etc", "start or end" }, { "a/..", "start or end" }, { "a/b..c", "'..'" },
      { "a/b--c", "'--'" }, { "-a/b", "start or end" }, { "a/b-", "start or end" }, { ".a/b", "start or end" },
      { "a/b.", "start or end" }, { "a/b.git", ".git" }, { "a/", "empty" }, { "/b", "empty" },
      { "a/b@main", "letters, digits" }, { "a:b/c", "letters, digits" }, { "a/" .. ("m"):rep(97), "longer than 96" },
      { "a/ü", "letters, digits" }, { "a\\b", "letters, digits" },
    }) do
      it(("refuses %s (%s)"):format(case[1]:gsub("\n", "\\n"), case[2]), function()
        local v, err = validate.repo_id(case[1])
        assert.is_nil(v)
        assert.equal("invalid_repo_id", err.code)
        assert.truthy(err.message:find(case[2], 1, true), err.message)
      end)
    end

    it("refuses non-strings", function()
      assert.is_nil((validate.repo_id(nil)))
      assert.is_nil((validate.repo_id(42)))
      assert.is_nil((validate.repo_id({ "a/b" })))
    end)
  end)

  describe("revision", function()
    for _, rev in ipairs({ "main", "v1.0", "refs/pr/1", "refs/pr/123", "release/2024-09",
      "0e9e39f249a16976918f6564b8830bc894c89659", "my_branch" }) do
      it("accepts " .. rev, function() assert.equal(rev, (validate.revision(rev))) end)
    end
    for _, rev in ipairs({ "", "../main", "a/../b", "main/", "/main", "a//b", "-x", "x.", "main?x=1",
      "main#x", "ma in", "ma%2Fin", "refs/heads/main", "refs/pr/x", "a:b", ("x"):rep(201) }) do
      it(("refuses %q"):format(rev), function()
        local v, err = validate.revision(rev)
        assert.is_nil(v)
        assert.equal("invalid_revision", err.code)
      end)
    end
    it("encodes '/' so a revision stays one path segment", function()
      assert.equal("refs%2Fpr%2F7", validate.encode_revision("refs/pr/7"))
      assert.equal("main", validate.encode_revision("main"))
    end)
  end)
end)
