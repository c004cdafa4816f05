# One image for every node; SERVICES picks what a container runs.
FROM node:20-bookworm-slim
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund
COPY . .
# The app stays root's and read-only to the node user; everything the platform writes goes to DATA_DIR=/data, owned by
# the node user (a new named volume mounted there takes this owner and mode). Without it every node died on
# `EACCES: mkdir '/app/data'`.
RUN mkdir -p /data && chown node:node /data && chmod 0700 /data
ENV HOST=0.0.0.0 NODE_ENV=production DATA_DIR=/data
VOLUME ["/data"]
USER node
# Node itself is the process that gets SIGTERM from `docker stop` (start.ts stops in order); no npm or tsx wrapper.
CMD ["node", "--import", "tsx", "start.ts"]
