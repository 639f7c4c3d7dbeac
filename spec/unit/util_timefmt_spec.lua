local tf = require "obleth.util.timefmt"

describe("obleth.util.timefmt", function()
  it("parses Slurm's time forms into minutes, rounding seconds up (sbatch --time)", function()
    local cases = { ["90"] = 90, ["5:30"] = 6, ["1:00:00"] = 60, ["2-00"] = 2880, ["1-02:03"] = 1563,
      ["0-00:00:01"] = 1, ["1-00:00:00"] = 1440 }
    for text, want in pairs(cases) do assert.equal(want, (tf.parse_minutes(text)), text) end
  end)

  it("refuses UNLIMITED, zero, malformed and absurd values with a message", function()
    for _, text in ipairs({ "UNLIMITED", "0", "-1", "1:2:3:4", "abc", "99999999999999999999", "1-25", "", "00:60",
      "1:00:60" }) do
      local m, err = tf.parse_minutes(text)
      assert.is_nil(m, text)
      assert.is_string(err, text)
    end
  end)

  it("formats minutes as Slurm prints them", function()
    assert.equal("1:30:00", tf.format_minutes(90))
    assert.equal("2-00:00:00", tf.format_minutes(2880))
    assert.equal("UNLIMITED", tf.format_minutes(math.huge))
  end)
end)
