/**
 * The gateway: one moleculer-web service whose routes come from the catalog (lib/routes.ts). It authenticates
 * (authority/authenticate.ts), passes the token and request facts in ctx.meta, maps every error once to
 * `{ statusCode, message, error }`, streams cursors as server-sent events, and serves docs, health and metrics.
 * This file wires the service; its parts are services/api/*.ts: the route table (route-table.ts), the forked request
 * handler (forked-handler.ts), the answers (answer.ts), the rate limit (rate-limit.ts), the cursor stream
 * (cursor-stream.ts), files (files.ts), and the gateway's `this` (gateway.ts).
 */
import { AUTHORITY_CHANGED } from "../lib/contracts";
import type { Server } from "http";
import type { Context, ServiceSchema } from "moleculer";
import ApiGateway from "moleculer-web";
import { Aes } from "../lib/crypto";
import { loadKeys, readConfig, StartupError, type PlatformConfig } from "../runtime/config";
import { ApiError } from "../lib/errors";
import { sharedKeyValue } from "../runtime/kv";
import { TransportWatch } from "../runtime/transport-watch";
import { JwtKeys } from "../lib/tokens";
import { allRoutes } from "../lib/routes";
import { Authenticator, callerIp, USER_CHANGED } from "../authority/authenticate";
import { CONSOLE_SECURITY_HEADERS, consoleAssets, consoleHtml, isConsoleAsset, rootClientIdOf } from "../runtime/console-page";
import { collectHealth } from "../runtime/health";
import { observeHttp, recordHealth } from "../runtime/metrics";
import { emitAudit, startShipper } from "../events/audit-shipper";
import { fileMethods } from "./api/files";
import { principalOf } from "../lib/types";
import { actingGets, refuseCrossSiteCookie } from "./api/cross-site";
import { answerClientError } from "./api/client-error";
import { LiveCursors } from "./api/live-cursor";
import { MqttWebSocketBridge } from "./api/mqtt-ws";
import { grantCache } from "../authority/grant-cache";
import { Idempotency } from "./api/idempotency";
import { NODE_STOPPING } from "../runtime/node-stopping";
import { Drain } from "./api/drain";
import { Cors } from "./api/cors";
import { McpEndpoint } from "./api/mcp";
import { asSchema } from "../lib/service";
import { answerMethods, sendJson } from "./api/answer";
import { cursorStreamMethods } from "./api/cursor-stream";
import { forkedHandlerMethods } from "./api/forked-handler";
import type { Ctx, Gateway, PrivateEndpoints, Req, Res } from "./api/gateway";
import { rateLimitMethods } from "./api/rate-limit";
import { API_JSON, API_PAGE, routeTable } from "./api/route-table";

export { MAX_OPEN_CURSORS } from "./api/cursor-stream";

/** Request headers the domain layers read; everything else stays at the gateway. */
const FORWARDED_HEADERS = ["x-zone", "x-exclude-soft-delete-query", "x-saga-session", "x-can-with-policies", "x-can-with-id-policies", "user-agent", "if-match", "if-none-match"];
/** How often the gateway refreshes platform_dependency_up from the health of every service (a Prometheus scrape is 15 s). */
const DEPENDENCY_GAUGE_MS = 15_000;

/** The gateway's schema; its routes are built with it (services/api/route-table.ts). */
export function apiService(cfg: PlatformConfig = readConfig()): ServiceSchema {
	const routes = allRoutes();
	const actingGetPaths = actingGets(routes);
	return asSchema<Gateway>({
		name: "api",
		mixins: [ApiGateway],
		settings: {
			port: cfg.port,
			ip: cfg.host,
			path: "",
			// Errors of every route, and of requests that match none, leave in the spec's shape.
			onError(this: Gateway, req: Req, res: Res, err: unknown) {
				this.sendErrorBody(req, res, err);
			},
			log4XXResponses: false,
			// Hundreds of alias lines at every start: at debug only (LOG_LEVEL=debug shows them).
			logRouteRegistration: "debug",
			logRequest: null,
			logResponse: null,
			routes: routeTable(cfg, routes),
		},

		created(this: Gateway) {
			const keys = loadKeys(cfg);
			// Built before the gateway listens (module-wide: every gateway of the process serves the same texts).
			API_PAGE();
			API_JSON();
			this.cfg = cfg;
			// moleculer-web's start waits for 'listening' only (a listen error is logged): on a port in use the node neither
			// listened nor exited. Its listen callback takes an error: the start fails at once, naming the port and its setting.
			const server = this.server;
			const listen = server?.listen.bind(server) as ((port: number, host: string, listening: () => void) => Server) | undefined;
			if (server && listen)
				Object.assign(server, {
					listen: (port: number, host: string, done: (err?: Error) => void) => {
						const refuse = (err: NodeJS.ErrnoException) =>
							done(new StartupError(`port ${port} (PORT) ${err.code === "EADDRINUSE" ? "is in use" : `cannot be bound on ${host} (${err.code ?? err.message})`}`));
						// moleculer-web's own listener would log the same failure again with a stack: set aside until listening.
						const others = server.listeners("error") as Array<(err: Error) => void>;
						server.removeAllListeners("error");
						server.once("error", refuse);
						return listen(port, host, () => {
							server.off("error", refuse);
							for (const l of others) server.on("error", l);
							done();
						});
					},
				});
			// The endpoint of moleculer-web's private `api.rest` action: the lean path's contexts are created on it, as
			// `this.actions.rest` creates them (ctx.service is the gateway: the callee sees `caller` "api").
			this.restEndpoint = (this.broker.registry as unknown as PrivateEndpoints).createPrivateActionEndpoint(this._serviceSpecification.actions[`${this.fullName}.rest`]);
			// Request audit entries leave through the durable event stream, in batches, off the request path.
			this.audit = startShipper(this.broker, (msg) => this.logger.warn(msg));
			/** Open cursor streams per principal on this gateway (see streamCursor). */
			this.openCursors = new Map<string, number>();
			this.kv = sharedKeyValue(cfg.redisUrl, cfg.redisPrefix);
			this.transport = new TransportWatch(this.broker);
			const registry = this.broker.registry as { nodes: { get(id: string): { available: boolean; instanceID: string | null } | undefined } };
			this.idempotency = new Idempotency(cfg, keys.aesSecret, {
				// A replayed answer is written by the gateway itself: counted and audited here (marked as a replay).
				onAnswer: (req, status, data) => {
					// A tool call's replay is counted with its /mcp request (services/api/mcp.ts).
					if (!(req as { $viaMcp?: boolean }).$viaMcp) observeHttp(this.broker, req, status);
					emitAudit(this.broker, req, status, data);
				},
				// A key's holder is gone once the registry knows its node disconnected, or running as another instance (this
				// node restarted under its NODE_ID included). A node it has never seen is left to the lease.
				owner: {
					node: this.broker.nodeID,
					inst: this.broker.instanceID,
					gone: (node, inst) => {
						const n = registry.nodes.get(node);
						return !!n && (!n.available || (n.instanceID !== null && n.instanceID !== inst));
					},
				},
			});
			this.authenticator = new Authenticator({
				jwt: new JwtKeys(keys.jwtSecret),
				aes: new Aes(keys.aesSecret),
				kv: this.kv,
				broker: this.broker,
				trustProxy: cfg.trustProxy,
				leewaySec: cfg.tokenLeewaySec,
			});
			/** `/mcp`: the MCP endpoint, its sealed sessions (services/api/mcp.ts). */
			this.mcp = new McpEndpoint(this, keys.aesSecret);
			/** `?live=true` cursors: the changes of each caller's view after its matches (services/api/live-cursor.ts). */
			this.liveCursors = new LiveCursors(this.broker, cfg, this.authenticator, this.logger, keys.aesSecret);
			/** MQTT over WebSocket on `/mqtt`, bridged to the embedded broker (services/api/mqtt-ws.ts). */
			this.mqttWs = new MqttWebSocketBridge({ broker: this.broker, logger: this.logger, jwtSecret: keys.jwtSecret, trustProxy: cfg.trustProxy });
			if (this.server) this.mqttWs.attach(this.server);
			this.drain = new Drain(this.server, this.broker.options.tracking?.shutdownTimeout ?? 10_000);
			this.cors = new Cors(cfg.corsOrigins ?? []);
		},

		started(this: Gateway) {
			this.transport.start();
			// Requests the HTTP parser refuses are answered in the spec's error shape (services/api/client-error.ts).
			this.server?.on("clientError", answerClientError);
			// platform_dependency_up follows /status between scrapes too (nobody may be calling /status).
			this.healthTimer = setInterval(
				() =>
					void collectHealth(this.broker).then(
						(h) => recordHealth(this.broker, h.info),
						() => undefined,
					),
				DEPENDENCY_GAUGE_MS,
			);
			this.healthTimer.unref();
		},

		async stopped(this: Gateway) {
			clearInterval(this.healthTimer);
			this.transport.stop();
			this.mqttWs.close();
			await this.liveCursors.stop();
			// The answers in flight are out (and their audit entries made) before the node goes on stopping.
			await this.drain.closed();
			// The last entries go to the stream before the node's broker (and its stream) stop.
			await this.audit?.stop();
			await this.idempotency.records.release();
		},

		actions: {
			/**
			 * Internal (never routed): applies revocations on this gateway and answers once they hold, so that a logout
			 * answers after every gateway refuses the token (authority/authenticate.ts, announceRevocation).
			 */
			revoke: {
				visibility: "public",
				params: { sessions: { type: "array", items: "string", default: [] }, hashes: { type: "array", items: "string", default: [] } },
				handler(this: Gateway, ctx: Context<{ sessions: string[]; hashes: string[] }>) {
					for (const s of ctx.params.sessions) this.authenticator.sessionRevoked(s);
					for (const h of ctx.params.hashes) this.authenticator.aptRevoked(h);
					return true;
				},
			},
		},

		events: {
			/** The node is stopping (moleculer.config.ts): live streams end first, so they do not hold the stop. */
			[NODE_STOPPING](this: Gateway) {
				this.liveCursors.endStreams();
				this.drain.start();
			},
			"auth.session.revoked"(this: Gateway, ctx: Context<{ session: string }>) {
				this.authenticator.sessionRevoked(ctx.params.session);
				void this.liveCursors.sweep();
			},
			"auth.apt.revoked"(this: Gateway, ctx: Context<{ hash: string }>) {
				this.authenticator.aptRevoked(ctx.params.hash);
				void this.liveCursors.sweep();
			},
			[USER_CHANGED](this: Gateway, ctx: Context<{ ids: string[] }>) {
				this.authenticator.userChanged(ctx.params.ids);
				void this.liveCursors.sweep();
			},
			// Live cursors decide views on this node with its grant index: a gateway without domain services drops it too.
			[AUTHORITY_CHANGED]() {
				grantCache.invalidate();
			},
		},

		methods: {
			...fileMethods,
			...forkedHandlerMethods,
			...answerMethods,
			...rateLimitMethods,
			...cursorStreamMethods,
			async authenticate(this: Gateway, ctx: Ctx, route: unknown, req: Req, res: Res, alias?: { fullPath?: string }) {
				const { token, kind } = await this.limitedAuthentication(ctx, req, res, alias);
				ctx.meta.token = token;
				ctx.meta.tokenKind = kind;
				return null;
			},
			async authenticateRevocable(this: Gateway, ctx: Ctx, route: unknown, req: Req, res: Res, alias?: { fullPath?: string }) {
				const { token, kind } = await this.limitedAuthentication(ctx, req, res, alias, { allowRevoked: true });
				ctx.meta.token = token;
				ctx.meta.tokenKind = kind;
				return null;
			},
			/**
			 * Refuses a cookie-authenticated request that changes state from another site (services/api/cross-site.ts), then
			 * authenticates, then counts the request (RATE_LIMIT) per principal; a refused request counts per IP.
			 */
			async limitedAuthentication(this: Gateway, ctx: Ctx, req: Req, res: Res, alias?: { fullPath?: string }, opts?: { allowRevoked: boolean }) {
				let found: { token: { uid?: string; aid?: string; cid?: string }; kind: string };
				try {
					if (!this.cors.listed(req)) refuseCrossSiteCookie(req, alias?.fullPath, actingGetPaths, this.cfg.trustProxy);
					found = await this.authenticator.authenticate(req, opts);
				} catch (err) {
					await this.limitRate(res, `ip:${ctx.meta.ip}`);
					throw err;
				}
				await this.limitRate(res, principalOf(found.token) ?? `ip:${ctx.meta.ip}`);
				return found;
			},
			prepareMeta(this: Gateway, ctx: Ctx, req: Req) {
				req.$startedAt = process.hrtime.bigint();
				ctx.meta.ip = callerIp(req, this.cfg.trustProxy);
				const headers: Record<string, string> = {};
				for (const h of FORWARDED_HEADERS) {
					const v = req.headers[h];
					if (v !== undefined) headers[h] = Array.isArray(v) ? v[0] : v;
				}
				ctx.meta.headers = headers;
			},
			/** The console's page (no `asset`) or one of its assets, with the console's Content-Security-Policy. */
			async serveConsole(this: Gateway, req: Req, res: Res, asset?: string) {
				for (const [k, v] of Object.entries(CONSOLE_SECURITY_HEADERS)) res.setHeader(k, v);
				if (asset !== undefined && !isConsoleAsset(asset)) return this.sendErrorBody(req, res, new ApiError(404, "not found"));
				let assets: Awaited<ReturnType<typeof consoleAssets>>;
				try {
					assets = await consoleAssets();
				} catch (err) {
					this.logger.warn(`console: its assets could not be built (${(err as Error).message}); run npm run build:console`);
					return this.sendErrorBody(req, res, new ApiError(503, "the console's assets are not built: run npm run build:console"));
				}
				// The page and the assets are revalidated at every load (a new build shows at once), answered 304 when unchanged.
				res.setHeader("Cache-Control", "no-cache");
				if (asset === undefined) return this.sendText(res, 200, consoleHtml(rootClientIdOf(this.cfg), assets), "text/html; charset=utf-8");
				const a = assets.get(asset)!;
				res.setHeader("ETag", a.etag);
				if (req.headers["if-none-match"] === a.etag) {
					res.writeHead(304);
					return res.end();
				}
				this.sendText(res, 200, a.body, a.type);
			},
			async handleStatus(this: Gateway, req: Req, res: Res) {
				const health = await collectHealth(this.broker);
				recordHealth(this.broker, health.info);
				sendJson(res, health.status === "ok" ? 200 : 503, health);
			},
		},
	});
}

export default apiService;
