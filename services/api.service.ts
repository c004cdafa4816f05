/**
 * The gateway: one moleculer-web service whose routes come from the catalog (lib/routes.ts). It authenticates
 * (services/auth/authenticate.ts), passes the token and request facts in ctx.meta, maps every error once to
 * `{ statusCode, message, error }`, streams cursors as server-sent events, and serves docs, health and metrics.
 */
import type { IncomingMessage, ServerResponse } from "http";
import type { Context, ServiceSchema } from "moleculer";
import ApiGateway from "moleculer-web";
import { Aes } from "../lib/crypto";
import { loadKeys, readConfig, type PlatformConfig } from "../lib/config";
import { toErrorBody, ApiError } from "../lib/errors";
import { sharedKeyValue } from "../lib/kv";
import { JwtKeys } from "../lib/tokens";
import { allRoutes, type RouteDef } from "../lib/routes";
import { Authenticator, callerIp } from "./auth/authenticate";
import { openApiDocument } from "../lib/openapi";
import { docsAsset, docsHtml, setDocsSecurityHeaders } from "../lib/docs-page";
import { collectHealth } from "../lib/health";
import { metricsText, observeHttp } from "../lib/metrics";
import { emitAudit } from "../lib/audit";

type Req = IncomingMessage & { $ctx: Context<any, any>; $params: any; $route?: any; $alias?: any; query?: Record<string, unknown>; $startedAt?: bigint };
type Res = ServerResponse & { $route?: any };

/** Request headers the domain layers read; everything else stays at the gateway. */
const FORWARDED_HEADERS = ["x-zone", "x-exclude-soft-delete-query", "x-saga-session", "x-can-with-policies", "x-can-with-id-policies", "user-agent"];
const CURSOR_PAGE = 100;

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
		res.end();
		return;
	}
	const text = JSON.stringify(body);
	res.writeHead(status, { "Content-Type": "application/json; charset=utf-8", "Content-Length": Buffer.byteLength(text) });
	res.end(text);
}

function aliasesOf(routes: RouteDef[]): Record<string, unknown> {
	const aliases: Record<string, unknown> = {};
	for (const r of routes) {
		const key = `${r.method} ${r.path}`;
		aliases[key] = r.stream
			? function (this: any, req: Req, res: Res) {
					return this.streamCursor(req, res, r.action).catch((err: unknown) => this.sendErrorBody(req, res, err));
				}
			: r.action;
	}
	return aliases;
}

/** Routes are built with the schema: moleculer-web mounts them in its own `created`, before ours runs. */
export function apiService(cfg: PlatformConfig = readConfig()): ServiceSchema {
	const routes = allRoutes();
	const common = {
		mergeParams: false,
		mappingPolicy: "restrict",
		autoAliases: false,
		bodyParsers: { json: { limit: "1mb", strict: false }, urlencoded: false },
		onBeforeCall(this: any, ctx: Context<any, any>, route: unknown, req: Req) {
			this.prepareMeta(ctx, req);
		},
		onAfterCall(this: any, ctx: Context<any, any>, route: unknown, req: Req, res: Res, data: unknown) {
			const status = (ctx.meta.$statusCode as number | undefined) ?? (res.statusCode || 200);
			observeHttp(this.broker, req, status);
			emitAudit(this.broker, req, status, data);
			return data;
		},
		onError(this: any, req: Req, res: Res, err: unknown) {
			this.sendErrorBody(req, res, err);
		},
	};
	return {
	name: "api",
	mixins: [ApiGateway],
	settings: {
		port: cfg.port,
		ip: cfg.host,
		path: "",
		// Errors of every route, and of requests that match none, leave in the spec's shape.
		onError(this: any, req: Req, res: Res, err: unknown) {
			this.sendErrorBody(req, res, err);
		},
		log4XXResponses: false,
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
					"GET /status"(this: any, req: Req, res: Res) {
						return this.handleStatus(req, res);
					},
					"GET /metrics"(this: any, req: Req, res: Res) {
						this.sendText(res, 200, metricsText(this.broker), "text/plain; version=0.0.4; charset=utf-8");
					},
					"GET /api-json"(this: any, req: Req, res: Res) {
						setDocsSecurityHeaders(res);
						sendJson(res, 200, openApiDocument());
					},
					"GET /api"(this: any, req: Req, res: Res) {
						setDocsSecurityHeaders(res);
						this.sendText(res, 200, docsHtml("/api-json"), "text/html; charset=utf-8");
					},
					"GET /api/assets/:name"(this: any, req: Req, res: Res) {
						setDocsSecurityHeaders(res);
						const a = docsAsset(String(req.$params?.params?.name ?? ""));
						if (!a) return this.sendErrorBody(req, res, new ApiError(404, "not found"));
						this.sendText(res, 200, a.body, a.type);
					},
				},
			},
			{ ...common, name: "public", path: "", authentication: false, aliases: aliasesOf(routes.filter((r) => r.public)) },
			{ ...common, name: "logout", path: "", authentication: "authenticateRevocable", aliases: { "GET /auth/logout": "auth.logout" } },
			{ ...common, name: "api", path: "", authentication: true, aliases: aliasesOf(routes.filter((r) => !r.public && r.path !== "/auth/logout")) },
		],
	},

	created(this: any) {
		const keys = loadKeys(cfg);
		this.cfg = cfg;
		this.authenticator = new Authenticator({
			jwt: new JwtKeys(keys.jwtSecret),
			aes: new Aes(keys.aesSecret),
			kv: sharedKeyValue(cfg.redisUrl, cfg.redisPrefix),
			broker: this.broker,
			trustProxy: cfg.trustProxy,
		});
	},

	events: {
		"auth.session.revoked"(this: any, ctx: Context<{ session: string }>) {
			this.authenticator.sessionRevoked(ctx.params.session);
		},
		"auth.apt.revoked"(this: any, ctx: Context<{ hash: string }>) {
			this.authenticator.aptRevoked(ctx.params.hash);
		},
	},

	methods: {
		async authenticate(this: any, ctx: Context<any, any>, route: unknown, req: Req) {
			const { token, kind } = await this.authenticator.authenticate(req);
			ctx.meta.token = token;
			ctx.meta.tokenKind = kind;
			return null;
		},
		async authenticateRevocable(this: any, ctx: Context<any, any>, route: unknown, req: Req) {
			const { token, kind } = await this.authenticator.authenticate(req, { allowRevoked: true });
			ctx.meta.token = token;
			ctx.meta.tokenKind = kind;
			return null;
		},
		prepareMeta(this: any, ctx: Context<any, any>, req: Req) {
			req.$startedAt = process.hrtime.bigint();
			ctx.meta.ip = callerIp(req, this.cfg.trustProxy);
			const headers: Record<string, string> = {};
			for (const h of FORWARDED_HEADERS) {
				const v = req.headers[h];
				if (v !== undefined) headers[h] = Array.isArray(v) ? v[0] : v;
			}
			ctx.meta.headers = headers;
		},
		sendErrorBody(this: any, req: Req, res: Res, err: unknown) {
			const body = toErrorBody(err);
			// The path only: the query string may carry a bearer (`?token=`), which must never reach a log.
			if (body.statusCode >= 500) this.logger.error("request failed", req.method, (req.url ?? "").split("?")[0], err);
			observeHttp(this.broker, req, body.statusCode);
			emitAudit(this.broker, req, body.statusCode, undefined, () => callerIp(req, this.cfg.trustProxy));
			sendJson(res, body.statusCode, body);
		},
		sendText(res: Res, status: number, body: string | Buffer, type: string) {
			res.writeHead(status, { "Content-Type": type, "Content-Length": Buffer.byteLength(body) });
			res.end(body);
		},
		async handleStatus(this: any, req: Req, res: Res) {
			const health = await collectHealth(this.broker);
			sendJson(res, health.status === "ok" ? 200 : 503, health);
		},

		/**
		 * The cursor is produced here, page by page, through the collection's `cursor` action (so every page passes
		 * the authority layer). The first page is read before any header leaves, so a bad query is a plain JSON
		 * error; later failures become an `event: error` frame. A client that goes away stops the loop.
		 */
		async streamCursor(this: any, req: Req, res: Res, action: string) {
			const ctx = req.$ctx;
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
			let closed = false;
			res.on("close", () => (closed = true));
			let offset = 0;
			const next = () => ctx.call(action, { ...params, page: { offset, size: Math.min(CURSOR_PAGE, remaining) } }) as Promise<{ items: Array<{ id: string }> }>;
			let page = await next();
			res.writeHead(200, { "Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache", Connection: "keep-alive", "X-Accel-Buffering": "no" });
			observeHttp(this.broker, req, 200);
			emitAudit(this.broker, req, 200);
			try {
				for (;;) {
					for (const doc of page.items) {
						if (closed) return;
						if (!res.write(`id: ${doc.id}\ndata: ${JSON.stringify(doc)}\n\n`)) await drainOrClose(res);
					}
					offset += page.items.length;
					remaining -= page.items.length;
					if (closed || page.items.length < CURSOR_PAGE || remaining <= 0) break;
					page = await next();
				}
				if (!closed) res.end("event: end\ndata: close\n\n");
			} catch (err) {
				if (!closed) res.end(`event: error\ndata: ${JSON.stringify(toErrorBody(err))}\n\n`);
			}
		},
	},
	};
}

export default apiService;
