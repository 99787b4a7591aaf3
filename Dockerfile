# syntax=docker/dockerfile:1
#
# One image for every role: `docker run … jobsvc` runs them all in one process, and
# `… jobsvc node --import tsx services/roles/main.ts --role projector` (or api, dispatcher,
# scheduler) runs one. Configuration is the environment of README "Configuration"; JOBSVC_SECRET
# is required, as the image never runs the development mode.
#
# Nothing is compiled. The service runs its TypeScript through tsx, as `npm start` does, which
# is why tsx is a production dependency: the background roles' worker thread registers tsx itself
# (services/roles/role-thread.mjs), the dashboard resolves its browser modules from node_modules
# at run time, and the migrations are read beside the code (projections/sql). Compiling would change
# all three and run code the tests never ran. tsx compiles each module once as it is first
# imported (and caches it in /tmp), so it costs start-up time, not request time.
# The SDK workspace (sdk/) is not built or copied: the service does not import it.

ARG NODE_VERSION=20

# Production dependencies only, installed where a native addon without a prebuilt binary for the
# platform (msgpackr-extract; msgpackr works without it) can still compile: the full image has
# python, make and a C++ compiler. The postinstall script applies patches/ (patch-package is a
# production dependency for that reason).
FROM node:${NODE_VERSION}-bookworm AS deps
WORKDIR /app
COPY package.json package-lock.json ./
COPY patches ./patches
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force

# The same Debian and Node as the deps stage, so node_modules (and its native parts) fit.
FROM node:${NODE_VERSION}-bookworm-slim AS runtime
WORKDIR /app
# In a container the service must listen beyond loopback; PORT is fixed so the health check knows it.
ENV NODE_ENV=production \
    HOST=0.0.0.0 \
    PORT=8080
# Owned by root (COPY's default) and not writable by the service's user: the process cannot rewrite its own code.
COPY --from=deps /app/node_modules ./node_modules
COPY package.json tsconfig.json ./
COPY domain ./domain
COPY streams ./streams
COPY projections ./projections
COPY services ./services
COPY dashboard ./dashboard
COPY deploy/healthcheck.mjs ./deploy/healthcheck.mjs
# The official image's unprivileged user (uid 1000).
USER node
# 8080: the API (PORT). 9464: /metrics, where METRICS_PORT=9464 is set (docker-compose.yml does);
# unset, the process serves no metrics.
EXPOSE 8080 9464
# The readiness route: 200 once NATS, JetStream, Postgres and the migrations answer. A container
# that runs no API role overrides it with `node deploy/healthcheck.mjs metrics` (and METRICS_PORT).
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 CMD ["node", "deploy/healthcheck.mjs"]
# node itself is PID 1 and gets docker's SIGTERM (npm would not pass it on), so a stop ends polls
# with 503, finishes what is in flight and closes cleanly.
CMD ["node", "--import", "tsx", "services/roles/main.ts"]
