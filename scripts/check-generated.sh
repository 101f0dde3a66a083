#!/usr/bin/env bash
# Fails when anything derived from openapi.yaml or prisma/schema.prisma is out of date.
set -euo pipefail
cd "$(dirname "$0")/.."
npx tsx codegen/index.ts > /dev/null
npx tsx scripts/db-migration.ts check
if [ -n "$(git status --porcelain -- src/generated)" ]; then
  echo "generated code is out of date: run npm run codegen and commit src/generated" >&2
  git status --porcelain -- src/generated >&2
  exit 1
fi
echo "generated code is up to date"
