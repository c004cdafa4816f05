# One image for every node; SERVICES picks what a container runs.
FROM node:20-bookworm-slim
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund
COPY . .
ENV HOST=0.0.0.0 NODE_ENV=production
USER node
CMD ["node_modules/.bin/tsx", "start.ts"]
