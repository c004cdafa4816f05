/**
 * The gateway's fork of moleculer-web's request handler: the lean path for the "api" route's action aliases
 * (services/api/lean-route.ts), `/mcp` with the route's own steps, the alias index, and the action call under an
 * Idempotency-Key. Everything else goes to moleculer-web's own handler.
 */
import type { Context } from "moleculer";
import ApiGateway from "moleculer-web";
import type { ApiError } from "../../lib/errors";
import { AliasIndex } from "./alias-index";
import { boundParsedBody } from "./early-answer";
import { actionError, leanMatch, runRouteMiddlewares } from "./lean-route";
import type { Alias, Ctx, Gateway, Req, Res } from "./gateway";
import type { WebRoute } from "./web";

/** moleculer-web's own request handler: every request the lean path (services/api/lean-route.ts) does not serve. */
const webHttpHandler = (ApiGateway as unknown as { methods: { httpHandler(this: unknown, req: unknown, res: unknown, next?: unknown): Promise<void> } }).methods.httpHandler;
/** moleculer-web's action call (the action, onAfterCall, the answer): run under the request's Idempotency-Key. */
const webCallAction = (ApiGateway as unknown as { methods: { callAction(this: unknown, ...args: unknown[]): Promise<unknown> } }).methods.callAction;

/** The handler's methods (mixed into the gateway's `methods`). */
export const forkedHandlerMethods = {
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
};
