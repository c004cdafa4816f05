/**
 * The gateway: one moleculer-web service whose routes come from the catalog (lib/routes.ts). It authenticates
 * (authority/authenticate.ts), passes the token and request facts in ctx.meta, maps every error once to
 * `{ statusCode, message, error }`, streams cursors as server-sent events, and serves docs, health and metrics.
 */
import { AUTHORITY_CHANGED } from "../lib/contracts";
import type { IncomingMessage, Server, ServerResponse } from "http";
import type { Context, Endpoint, Service, ServiceSchema } from "moleculer";
import ApiGateway from "moleculer-web";
import { Aes } from "../lib/crypto";
import { loadKeys, readConfig, StartupError, type PlatformConfig } from "../runtime/config";
import { toErrorBody, ApiError, retryAfterOf, wwwAuthenticateOf } from "../lib/errors";
import { sharedKeyValue, type KeyValue } from "../runtime/kv";
import { TransportWatch } from "../runtime/transport-watch";
import { JwtKeys } from "../lib/tokens";
import { allRoutes, type RouteDef } from "../lib/routes";
import { Authenticator, callerIp, USER_CHANGED, type Authenticated } from "../authority/authenticate";
import { openApiDocument } from "../lib/openapi";
import { DOC_SERVICES, openApiServiceDocument } from "../lib/openapi-split";
import { docsAsset, docsHtml, setDocsSecurityHeaders } from "../runtime/docs-page";
import { CONSOLE_SECURITY_HEADERS, consoleAssets, consoleHtml, isConsoleAsset, rootClientIdOf } from "../runtime/console-page";
import { collectHealth } from "../runtime/health";
import { metricsText, observeHttp, recordHealth } from "../runtime/metrics";
import { emitAudit, startShipper } from "../events/audit-shipper";
import { fileMethods } from "./api/files";
import { AliasIndex } from "./api/alias-index";
import { isFormRequest, tokenRequestFromForm, withBasicClientAuth } from "../lib/oauth-form";
import { assertBodyMedia } from "../lib/body-media";
import { isPlainObject } from "../lib/validate";
import { principalOf } from "../lib/types";
import { actionError, leanMatch, runRouteMiddlewares } from "./api/lean-route";
import { actingGets, refuseCrossSiteCookie } from "./api/cross-site";
import { answerClientError } from "./api/client-error";
import { metricsAuthorized, METRICS_UNAUTHORIZED, PROMETHEUS_TYPE } from "../runtime/ops-server";
import { lastEventIdOf, LiveCursors } from "./api/live-cursor";
import { MqttWebSocketBridge } from "./api/mqtt-ws";
import { grantCache } from "../authority/grant-cache";
import { Idempotency } from "./api/idempotency";
import { answerText } from "../engine/answer-cache";
import { NODE_STOPPING } from "../runtime/node-stopping";
import { Drain } from "./api/drain";
import { Cors } from "./api/cors";
import { refuseUnknownQuery } from "./api/query-params";
import { answeredEarly, boundParsedBody, endAnswer, FORM_BODY_LIMIT, JSON_BODY_LIMIT } from "./api/early-answer";
import { McpEndpoint, MCP_PATH } from "./api/mcp";
import type { GatewayContext, GatewayRequest, GatewayResponse, WebAlias, WebRoute } from "./api/web";
import { asSchema } from "../lib/service";

/** moleculer-web's own request handler: every request the lean path (services/api/lean-route.ts) does not serve. */
const webHttpHandler = (ApiGateway as unknown as { methods: { httpHandler(this: unknown, req: unknown, res: unknown, next?: unknown): Promise<void> } }).methods.httpHandler;
/** moleculer-web's action call (the action, onAfterCall, the answer): run under the request's Idempotency-Key. */
const webCallAction = (ApiGateway as unknown as { methods: { callAction(this: unknown, ...args: unknown[]): Promise<unknown> } }).methods.callAction;

type Req = GatewayRequest;
type Res = GatewayResponse;
type Ctx = GatewayContext;
type Alias = { action?: string | null; method?: string; fullPath?: string };

/**
 * moleculer-web's own state and methods the gateway reads or calls (its src/index.js; its typings declare none of
 * them). `server` is the plain HTTP server it creates (the gateway sets no `https` or `http2`).
 */
interface WebGateway {
	server?: Server;
	aliases: WebAlias[];
	_trackedContexts: Context[];
	_serviceSpecification: { actions: Record<string, unknown> };
	parseQueryString(req: IncomingMessage): { query: Record<string, unknown> };
	logRequest(req: Req): void;
	corsHandler(route: WebRoute, req: Req, res: Res): boolean;
	aliasHandler(req: Req, res: Res, alias: WebAlias): Promise<unknown>;
	errorHandler(req: Req, res: Res, err: Error): void;
}

/** The broker registry's private-endpoint factory (Moleculer's typings leave it out). */
interface PrivateEndpoints {
	createPrivateActionEndpoint(action: unknown): Endpoint;
}

/** The gateway's `this` (lib/service.ts): moleculer-web's part, the state `created` sets, and the gateway's methods. */
type Gateway = Service &
	WebGateway & {
		cfg: PlatformConfig;
		restEndpoint: Endpoint;
		audit?: ReturnType<typeof startShipper>;
		/** Open cursor streams per principal on this gateway (see streamCursor). */
		openCursors: Map<string, number>;
		kv: KeyValue;
		transport: TransportWatch;
		idempotency: Idempotency;
		authenticator: Authenticator;
		mcp: McpEndpoint;
		liveCursors: LiveCursors;
		mqttWs: MqttWebSocketBridge;
		drain: Drain;
		cors: Cors;
		healthTimer?: NodeJS.Timeout;
		aliasIndex?: { of: AliasIndex<WebAlias>; length: number };
		streamCursor(req: Req, res: Res, action: string): Promise<void>;
		handleUpload(req: Req, res: Res, action: string): Promise<void>;
		handleDownload(req: Req, res: Res, action: string): Promise<void>;
		serveMcp(ctx: Ctx, route: WebRoute, req: Req, res: Res, alias: Alias | undefined): Promise<void>;
		resolveAlias(url: string, method?: string): { alias: WebAlias; params: Record<string, unknown> } | false;
		authenticate(ctx: Ctx, route: unknown, req: Req, res: Res, alias?: Alias): Promise<null>;
		limitedAuthentication(ctx: Ctx, req: Req, res: Res, alias?: Alias, opts?: { allowRevoked: boolean }): Promise<Authenticated>;
		limitRate(res: Res, who: string): Promise<void>;
		prepareMeta(ctx: Ctx, req: Req): void;
		sendErrorBody(req: Req, res: Res, err: unknown): void;
		sendText(res: Res, status: number, body: string | Buffer, type: string): void;
		serveConsole(req: Req, res: Res, asset?: string): Promise<void>;
		handleStatus(req: Req, res: Res): Promise<void>;
	};

/** Request headers the domain layers read; everything else stays at the gateway. */
const FORWARDED_HEADERS = ["x-zone", "x-exclude-soft-delete-query", "x-saga-session", "x-can-with-policies", "x-can-with-id-policies", "user-agent", "if-match", "if-none-match"];
const CURSOR_PAGE = 100;
/** How often the gateway refreshes platform_dependency_up from the health of every service (a Prometheus scrape is 15 s). */
const DEPENDENCY_GAUGE_MS = 15_000;
/** docs/contracts.md "Limits the platform keeps": open `/cursor` streams per principal on one gateway. */
export const MAX_OPEN_CURSORS = 8;

/**
 * Resolves on the next `drain` or `close`, then removes both listeners (a race of two `events.once` would leave
 * the loser attached on every wait: listeners pile up on a long stream).
 */
function drainOrClose(res: ServerResponse): Promise<void> {
	return new Promise((resolve) => {
		const done = () => {
			res.off("drain", done);
			res.off("close", done);
			resolve();
		};
		res.on("drain", done);
		res.on("close", done);
	});
}

function sendJson(res: ServerResponse, status: number, body: unknown): void {
	if (res.headersSent) {
		// An answer given early ends once the body is dropped (services/api/early-answer.ts), not now.
		if (!answeredEarly(res)) res.end();
		return;
	}
	const text = JSON.stringify(body);
	res.writeHead(status, { "Content-Type": "application/json; charset=utf-8", "Content-Length": Buffer.byteLength(text) });
	endAnswer(res, text);
}

/**
 * The documentation's bodies (the OpenAPI documents as JSON text, the /api page): built once, when the gateway is
 * created, so that no request pays the build (about 100 ms of CPU for the whole document) or its stringify.
 */
const docTexts = new Map<string, string>();
function docText(key: string, make: () => string): string {
	let text = docTexts.get(key);
	if (text === undefined) docTexts.set(key, (text = make()));
	return text;
}
const API_PAGE = () => docText("page", () => docsHtml("/api-json"));
const API_JSON = () => docText("json", () => JSON.stringify(openApiDocument()));

function sendJsonText(res: ServerResponse, text: string): void {
	res.writeHead(200, { "Content-Type": "application/json; charset=utf-8", "Content-Length": Buffer.byteLength(text) });
	res.end(text);
}

function aliasesOf(routes: RouteDef[]): Record<string, unknown> {
	const aliases: Record<string, unknown> = {};
	for (const r of routes) {
		const key = `${r.method} ${r.path}`;
		const custom = r.stream ? "streamCursor" : r.upload ? "handleUpload" : r.download ? "handleDownload" : undefined;
		aliases[key] = custom
			? function (this: Gateway, req: Req, res: Res) {
					return this[custom](req, res, r.action).catch((err: unknown) => this.sendErrorBody(req, res, err));
				}
			: r.action;
	}
	return aliases;
}

/** `/mcp`'s alias, for a request that reaches moleculer-web's own handler (httpHandler serves it: serveMcp). */
function mcpAlias(this: Gateway, req: Req, res: Res) {
	return this.serveMcp(req.$ctx, req.$route!, req, res, req.$alias).catch((err: unknown) => this.sendErrorBody(req, res, err));
}

/** Routes are built with the schema: moleculer-web mounts them in its own `created`, before ours runs. */
export function apiService(cfg: PlatformConfig = readConfig()): ServiceSchema {
	const routes = allRoutes();
	const actingGetPaths = actingGets(routes);
	const common = {
		mergeParams: false,
		mappingPolicy: "restrict",
		autoAliases: false,
		bodyParsers: { json: { limit: JSON_BODY_LIMIT, strict: false }, urlencoded: false },
		async onBeforeCall(
			this: Gateway,
			ctx: Ctx,
			route: { name?: string; opts?: { authentication?: unknown } },
			req: Req,
			res: Res,
			alias?: { action?: string | null; method?: string; fullPath?: string },
		) {
			this.prepareMeta(ctx, req);
			// Without the transporter no call can reach another node: 503 now rather than a 504 after requestTimeout.
			if (route?.name !== "ops") this.transport.assertConnected();
			// RATE_LIMIT: routes without authentication count per IP here; authenticated ones in authenticate().
			if (route?.name !== "ops" && !route?.opts?.authentication) await this.limitRate(res, `ip:${ctx.meta.ip}`);
			// A body the route's parser does not read says so (lib/body-media.ts); custom handlers (uploads) read their own.
			if (alias?.action) assertBodyMedia(req, route?.name === "token" ? "json-or-form" : "json");
			// Query parameters the route does not take answer 400, not a default silently (services/api/query-params.ts).
			if (route?.name !== "ops") refuseUnknownQuery(req.query, alias);
		},
		onAfterCall(this: Gateway, ctx: Ctx, route: unknown, req: Req, res: Res, data: unknown) {
			const status = (ctx.meta.$statusCode as number | undefined) ?? (res.statusCode || 200);
			observeHttp(this.broker, req, status);
			emitAudit(this.broker, req, status, data);
			// A keyed request's answer is kept before it leaves (services/api/idempotency.ts).
			return (req as { $idempotency?: unknown }).$idempotency ? this.idempotency.answered(req, status, data).then(() => data) : data;
		},
		onError(this: Gateway, req: Req, res: Res, err: unknown) {
			this.sendErrorBody(req, res, err);
		},
	};
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
			routes: [
				{
					...common,
					name: "ops",
					path: "",
					authentication: false,
					bodyParsers: false,
					aliases: {
						"GET /status"(this: Gateway, req: Req, res: Res) {
							return this.handleStatus(req, res);
						},
						"GET /metrics"(this: Gateway, req: Req, res: Res) {
							// METRICS_TOKEN: the metrics name services, routes and traffic; set, only its bearer reads them.
							if (!metricsAuthorized(req, cfg.metricsToken)) {
								res.setHeader("WWW-Authenticate", "Bearer");
								return this.sendErrorBody(req, res, METRICS_UNAUTHORIZED());
							}
							this.sendText(res, 200, metricsText(this.broker), PROMETHEUS_TYPE);
						},
						"GET /api-json"(this: Gateway, req: Req, res: Res) {
							setDocsSecurityHeaders(res);
							sendJsonText(res, API_JSON());
						},
						"GET /api-json/:service"(this: Gateway, req: Req, res: Res) {
							setDocsSecurityHeaders(res);
							const name = String(req.$params?.params?.service ?? "");
							if (!DOC_SERVICES.includes(name))
								return this.sendErrorBody(
									req,
									res,
									new ApiError(404, `no API document for '${name.slice(0, 64)}' (services: ${DOC_SERVICES.join(", ")}; the whole API: /api-json)`),
								);
							sendJsonText(
								res,
								docText(`json:${name}`, () => JSON.stringify(openApiServiceDocument(name))),
							);
						},
						// The root points newcomers (and browsers) to the documentation.
						"GET /"(this: Gateway, req: Req, res: Res) {
							sendJson(res, 200, { docs: "/api", openapi: "/api-json", status: "/status", metrics: "/metrics", token: "POST /auth/token" });
						},
						"GET /api"(this: Gateway, req: Req, res: Res) {
							setDocsSecurityHeaders(res);
							this.sendText(res, 200, API_PAGE(), "text/html; charset=utf-8");
						},
						"GET /api/assets/:name"(this: Gateway, req: Req, res: Res) {
							setDocsSecurityHeaders(res);
							const a = docsAsset(String(req.$params?.params?.name ?? ""));
							if (!a) return this.sendErrorBody(req, res, new ApiError(404, "not found"));
							// Cached by the browser (and its compiled-code cache): a second visit does not parse 1.5 MB again.
							res.setHeader("Cache-Control", "public, max-age=3600");
							res.setHeader("ETag", a.etag);
							if (req.headers["if-none-match"] === a.etag) {
								res.writeHead(304);
								return res.end();
							}
							this.sendText(res, 200, a.body, a.type);
						},
						// The browser console (runtime/console-page.ts): its two assets, and its page at every address below
						// /console (the script routes by the address).
						"GET /console/assets/:name"(this: Gateway, req: Req, res: Res) {
							return this.serveConsole(req, res, String(req.$params?.params?.name ?? ""));
						},
						"GET /console"(this: Gateway, req: Req, res: Res) {
							return this.serveConsole(req, res);
						},
						"GET /console/:view*"(this: Gateway, req: Req, res: Res) {
							return this.serveConsole(req, res);
						},
					},
				},
				{
					// POST /auth/token also as OAuth 2.0 clients send it (RFC 6749): a form body, `scope`, HTTP Basic client auth.
					...common,
					name: "token",
					path: "",
					authentication: false,
					bodyParsers: { json: { limit: JSON_BODY_LIMIT, strict: false }, urlencoded: { extended: false, limit: FORM_BODY_LIMIT, parameterLimit: 100 } },
					async onBeforeCall(this: Gateway, ctx: Ctx, route: WebRoute, req: Req, res: Res, alias?: { action?: string | null }) {
						await common.onBeforeCall.call(this, ctx, route, req, res, alias);
						const params = req.$params ?? {};
						if (isFormRequest(req.headers["content-type"])) params.body = tokenRequestFromForm(params.body);
						if (isPlainObject(params.body)) params.body = withBasicClientAuth(params.body, req.headers.authorization);
					},
					aliases: aliasesOf(routes.filter((r) => r.public && r.path === "/auth/token")),
				},
				{ ...common, name: "public", path: "", authentication: false, aliases: aliasesOf(routes.filter((r) => r.public && r.path !== "/auth/token")) },
				{ ...common, name: "logout", path: "", authentication: "authenticateRevocable", aliases: aliasesOf(routes.filter((r) => r.path === "/auth/logout")) },
				{ ...common, name: "api", path: "", authentication: true, aliases: aliasesOf(routes.filter((r) => !r.public && r.path !== "/auth/logout")) },
				// The MCP endpoint (services/api/mcp.ts): served by httpHandler (serveMcp); the aliases name its methods.
				{ ...common, name: "mcp", path: "", authentication: true, aliases: { [`POST ${MCP_PATH}`]: mcpAlias, [`GET ${MCP_PATH}`]: mcpAlias, [`DELETE ${MCP_PATH}`]: mcpAlias } },
			],
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
			/** moleculer-web's body encoder: a kept answer's text as it was made (engine/answer-cache.ts), else JSON. */
			encodeResponse(req: Req, res: Res, data: unknown) {
				return answerText(data) ?? JSON.stringify(data);
			},
			/**
			 * The HTTP server's handler. The "api" route's action aliases (authenticated collection CRUD) are served here
			 * without moleculer-web's `api.rest` action call (services/api/lean-route.ts): the same Context (request id
			 * from x-request-id / x-correlation-id), tracked for a clean stop, then moleculer-web's own route steps and
			 * error path. Everything else goes to moleculer-web's handler.
			 */
			async httpHandler(
				this: Gateway,
				req: Req & { parsedUrl?: string; baseUrl?: string; $startTime?: [number, number]; $service?: Gateway; $next?: unknown },
				res: Res & { $service?: Gateway; $ctx?: Ctx; locals?: Record<string, unknown> },
				next?: unknown,
			) {
				// A stopping gateway answers what it is given, each on a connection that then closes (services/api/drain.ts).
				if (this.drain.draining) res.setHeader("Connection", "close");
				// CORS_ORIGINS: a listed origin's answers carry its CORS headers; a preflight is answered here, before authentication.
				if (this.cors.handle(req, res, (err: ApiError) => this.sendErrorBody(req, res, err))) return;
				// A body over its parser's limit is answered now, never read to its end (services/api/early-answer.ts).
				const tooLarge = boundParsedBody(req, (req.url ?? "").split("?")[0] === "/auth/token", (err) => this.sendErrorBody(req, res, err));
				if (tooLarge) {
					// The request's id, as moleculer-web's handler would have answered it.
					const id = req.headers["x-correlation-id"] ?? req.headers["x-request-id"];
					res.setHeader("X-Request-ID", typeof id === "string" && id ? id : this.broker.generateUid());
					return this.sendErrorBody(req, res, tooLarge);
				}
				const match = leanMatch(req, (url, method) => this.resolveAlias(url, method), "api", "mcp");
				if (!match) return webHttpHandler.call(this, req, res, next);
				// moleculer-web's httpHandler, then its `rest` action's handler and routeHandler, for one alias (for `/mcp`,
				// the route's own steps, then the MCP endpoint: services/api/mcp.ts).
				req.$startTime = process.hrtime();
				req.$service = this;
				req.$next = next;
				res.$service = this;
				res.locals = res.locals || {};
				let requestID = req.headers["x-request-id"];
				if (req.headers["x-correlation-id"]) requestID = req.headers["x-correlation-id"];
				const ctx = this.broker.ContextFactory.create(this.broker, this.restEndpoint, { req, res }, { requestID });
				// Moleculer's context tracker: a stopping gateway waits for the requests it serves.
				const tracked: Context[] | undefined = this.broker.options.tracking?.enabled ? this._trackedContexts : undefined;
				tracked?.push(ctx);
				try {
					req.$ctx = ctx;
					res.$ctx = ctx;
					if (ctx.requestID) res.setHeader("X-Request-ID", ctx.requestID);
					if (!req.originalUrl) req.originalUrl = req.url;
					req.parsedUrl = match.url;
					if (!req.query) req.query = this.parseQueryString(req).query;
					const { alias, params } = match.found;
					const route = alias.route;
					req.baseUrl = route.path;
					req.url = req.originalUrl!.substring(route.path.length);
					if (req.url.length == 0 || req.url[0] !== "/") req.url = "/" + req.url;
					req.$route = route;
					res.$route = route;
					this.logRequest(req);
					const parsing = runRouteMiddlewares(this, req, res, route.middlewares);
					if (parsing) await parsing;
					if (this.corsHandler(route, req, res)) return;
					req.$params = { body: (req as { body?: unknown }).body, query: req.query, params };
					req.$alias = alias;
					if (route.name === "mcp") await this.serveMcp(ctx, route, req, res, alias);
					else await this.aliasHandler(req, res, alias);
				} catch (err) {
					// moleculer-web answered nothing more once the response had finished or the client had gone.
					if (res.writableFinished || res.destroyed) return;
					this.errorHandler(req, res, actionError(err, ctx));
				} finally {
					if (tracked) {
						const i = tracked.indexOf(ctx);
						if (i !== -1) tracked.splice(i, 1);
					}
				}
			},
			/**
			 * `/mcp` (services/api/mcp.ts) after the route's body parser: moleculer-web's steps for an alias (onBeforeCall, the
			 * bearer and the rate limit), then the endpoint. Served here rather than as moleculer-web's custom alias: the
			 * request's Context stays tracked until it is answered, and nothing waits for a `next` an answer never calls.
			 */
			async serveMcp(this: Gateway, ctx: Ctx, route: WebRoute, req: Req, res: Res, alias: Alias | undefined) {
				await route.onBeforeCall.call(this, ctx, route, req, res, alias);
				await this.authenticate(ctx, route, req, res, alias);
				await this.mcp.handle(req, res);
			},
			callAction(this: Gateway, route: unknown, actionName: string, req: Req, res: Res, params: unknown) {
				return this.idempotency.around(req, res, actionName, () => webCallAction.call(this, route, actionName, req, res, params));
			},
			/** moleculer-web's alias lookup, through an index by first path segment (services/api/alias-index.ts). */
			resolveAlias(this: Gateway, url: string, method = "GET") {
				const aliases = this.aliases;
				let index = this.aliasIndex;
				// Rebuilt whenever moleculer-web changes its alias list (routes are added at start only).
				if (!index || index.of.aliases !== aliases || index.length !== aliases.length) this.aliasIndex = index = { of: new AliasIndex(aliases), length: aliases.length };
				return index.of.resolve(url, method);
			},
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
			/**
			 * RATE_LIMIT (off by default): one token bucket per principal or IP in the platform cache (runtime/kv rateTake:
			 * GCRA, atomic in Redis, so every gateway shares it). Empty → 429 `too many requests` with Retry-After in
			 * whole seconds. An unreachable cache lets the request through (the limit protects, it must not take the
			 * platform down with the cache).
			 */
			async limitRate(this: Gateway, res: Res, who: string) {
				const limit = this.cfg.rateLimit as PlatformConfig["rateLimit"];
				if (!limit) return;
				let wait = 0;
				try {
					wait = await this.kv.rateTake(`rate:${who}`, limit.rate, limit.burst);
				} catch {
					return;
				}
				if (wait <= 0) return;
				if (!res.headersSent) res.setHeader("Retry-After", String(Math.max(1, Math.ceil(wait / 1000))));
				throw new ApiError(429, "too many requests");
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
			sendErrorBody(this: Gateway, req: Req, res: Res, err: unknown) {
				// Answered already, before the body's end: a later failure of the same request (the body parser's) is not news.
				if (answeredEarly(res)) return;
				// A body that does not inflate under its Content-Encoding: zlib's code (Z_DATA_ERROR...) is all that survives.
				const zlib = typeof (err as { code?: unknown })?.code === "string" && /^Z_/.test((err as { code: string }).code);
				if (zlib)
					err = new ApiError(
						400,
						`request body is not valid ${
							String(req.headers["content-encoding"] ?? "")
								.trim()
								.toLowerCase() || "compressed data"
						}`,
					);
				const body = toErrorBody(err);
				// The path only: the query string may carry a bearer (`?token=`), which must never reach a log.
				if (body.statusCode >= 500) this.logger.error("request failed", req.method, (req.url ?? "").split("?")[0], err);
				observeHttp(this.broker, req, body.statusCode);
				emitAudit(this.broker, req, body.statusCode, undefined, () => callerIp(req, this.cfg.trustProxy));
				const retryAfter = retryAfterOf(err, body.statusCode, this.cfg.heartbeatTimeoutMs);
				if (retryAfter !== undefined && !res.headersSent) res.setHeader("Retry-After", String(retryAfter));
				const challenge = wwwAuthenticateOf(err);
				if (challenge !== undefined && !res.headersSent) res.setHeader("WWW-Authenticate", challenge);
				sendJson(res, body.statusCode, body);
			},
			sendText(res: Res, status: number, body: string | Buffer, type: string) {
				res.writeHead(status, { "Content-Type": type, "Content-Length": Buffer.byteLength(body) });
				res.end(body);
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

			/**
			 * The cursor is produced here, page by page, through the collection's `cursor` action (so every page passes
			 * the authority layer). The first page is read before any header leaves, so a bad query is a plain JSON
			 * error; later failures become an `event: error` frame. A client that goes away stops the loop.
			 */
			async streamCursor(this: Gateway, req: Req, res: Res, action: string) {
				const ctx = req.$ctx;
				// At most MAX_OPEN_CURSORS open streams per principal (429 before any SSE header); the slot is freed when the
				// response closes, whichever way (end, client gone, idle timeout).
				const who = principalOf(ctx.meta.token) ?? `ip:${ctx.meta.ip}`;
				const openCursors = this.openCursors as Map<string, number>;
				const open = openCursors.get(who) ?? 0;
				if (open >= MAX_OPEN_CURSORS) throw new ApiError(429, "too many open cursors");
				openCursors.set(who, open + 1);
				let released = false;
				res.once("close", () => {
					if (released) return;
					released = true;
					const n = (openCursors.get(who) ?? 1) - 1;
					if (n > 0) openCursors.set(who, n);
					else openCursors.delete(who);
				});
				// A client that reads nothing: the socket buffer stays full, no 'drain' comes; after CURSOR_IDLE_MS the
				// stream is destroyed (its buffers go with it). The next item is never produced while the buffer is full.
				const idleMs: number = this.cfg.cursorIdleMs;
				const drained = async () => {
					const timer = setTimeout(() => res.destroy(), idleMs);
					try {
						await drainOrClose(res);
					} finally {
						clearTimeout(timer);
					}
				};
				const finish = (text: string) => {
					res.end(text);
					if (res.writableFinished) return;
					const timer = setTimeout(() => res.destroy(), idleMs);
					res.once("close", () => clearTimeout(timer));
				};
				const params = req.$params ?? {};
				const pagination = params.query?.pagination;
				let remaining = Infinity;
				if (pagination !== undefined) {
					try {
						const p = typeof pagination === "string" ? JSON.parse(pagination) : pagination;
						remaining = Number.isInteger(p?.limit) ? p.limit : 10;
					} catch {
						remaining = 10; // the action answers the 400 itself
					}
				}
				// A reconnecting EventSource sends the id of the last event it got: the stream resumes after that document
				// (the ones before it, in the same order, are not sent again).
				const lastEventId = lastEventIdOf(req.headers, params.query);
				let resumeAfter: string | undefined;
				// `?live=true`: validated now (a plain JSON error), attached after the matches; a position resumes without them.
				const live = await this.liveCursors.prepare(req, action, params);
				const sse = () => {
					res.writeHead(200, { "Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache", Connection: "keep-alive", "X-Accel-Buffering": "no" });
					observeHttp(this.broker, req, 200);
					emitAudit(this.broker, req, 200);
				};
				if (live?.resumes) {
					sse();
					return live.attach(res);
				}
				if (lastEventId !== undefined && String(lastEventId).trim() !== "") {
					resumeAfter = String(lastEventId).trim();
					if (!/^[0-9a-f]{24}$/i.test(resumeAfter)) throw new ApiError(400, "Last-Event-ID must be the id of a document of this cursor (24 hex digits)");
				}
				let closed = false;
				res.on("close", () => (closed = true));
				let offset = 0;
				const next = () => ctx.call(action, { ...params, page: { offset, size: Math.min(CURSOR_PAGE, remaining) } }) as Promise<{ items: Array<{ id: string }> }>;
				let page = await next();
				sse();
				try {
					for (;;) {
						for (const doc of page.items) {
							if (closed) return;
							if (resumeAfter !== undefined) {
								if (doc.id === resumeAfter) resumeAfter = undefined;
								continue;
							}
							if (!res.write(`id: ${doc.id}\ndata: ${JSON.stringify(doc)}\n\n`)) await drained();
						}
						offset += page.items.length;
						remaining -= page.items.length;
						if (closed || page.items.length < CURSOR_PAGE || remaining <= 0) break;
						page = await next();
					}
					if (!closed && resumeAfter !== undefined)
						finish(
							`event: error\ndata: ${JSON.stringify(toErrorBody(new ApiError(404, `Last-Event-ID ${resumeAfter} is not among this cursor's documents; reconnect without it to start over`)))}\n\n`,
						);
					else if (!closed && live) live.attach(res);
					else if (!closed) finish("event: end\ndata: close\n\n");
				} catch (err) {
					if (!closed) finish(`event: error\ndata: ${JSON.stringify(toErrorBody(err))}\n\n`);
				}
			},
		},
	});
}

export default apiService;
