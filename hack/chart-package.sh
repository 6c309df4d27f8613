#!/usr/bin/env bash
# Packages the library chart and the application chart into a chart repository
# folder: `helm lint --strict`, `helm package` (which stores charts/elector-lib,
# vendored as a symlink, inside the application chart's package) and
# `helm repo index`. With CHART_OCI set (oci://host/path), pushes both packages
# there as well (`helm push`; log in first with `helm registry login`).
#
#   hack/chart-package.sh [OUT_DIR]      default: dist/charts
#
# HELM names a helm binary to use; by default helm is built from test/helm's
# module, with the flags of make helm-test, so that it is the version the
# tests use (and its compiled packages are shared with them).
set -euo pipefail
repo_root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$repo_root/dist/charts}
url=${CHART_REPO_URL:-https://elector.github.io/elector/charts}
mkdir -p "$out"
out=$(cd "$out" && pwd)

helm=${HELM:-}
if [[ -z $helm ]]; then
	helm=$repo_root/dist/bin/helm
	(cd "$repo_root/test/helm" && CGO_ENABLED=0 GOWORK=off ${GO:-go} build -trimpath -o "$helm" helm.sh/helm/v4/cmd/helm)
fi

for chart in elector-lib elector; do
	"$helm" lint --strict "$repo_root/charts/$chart"
	"$helm" package "$repo_root/charts/$chart" --destination "$out"
done
# --merge keeps the entries of earlier releases when $out holds the published index.
if [[ -f $out/index.yaml ]]; then
	"$helm" repo index "$out" --url "$url" --merge "$out/index.yaml"
else
	"$helm" repo index "$out" --url "$url"
fi
echo "charts and index.yaml in $out"

if [[ -n ${CHART_OCI:-} ]]; then
	for chart in elector-lib elector; do
		version=$("$helm" show chart "$repo_root/charts/$chart" | sed -n 's/^version: //p')
		"$helm" push "$out/$chart-$version.tgz" "$CHART_OCI" ${CHART_OCI_FLAGS:-}
	done
fi
