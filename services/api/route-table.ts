/**
 * The gateway's routes (moleculer-web's `routes`): the ops pages (status, metrics, the API documents, the console),
 * the token route, and the catalog's routes (lib/routes.ts) by authentication: public, logout, api, mcp.
 */
import type { PlatformConfig } from "../../runtime/config";
import { ApiError } from "../../lib/errors";
import { assertBodyMedia } from "../../lib/body-media";
import { isFormRequest, tokenRequestFromForm, withBasicClientAuth } from "../../lib/oauth-form";
import { openApiDocument } from "../../lib/openapi";
import { DOC_SERVICES, openApiServiceDocument } from "../../lib/openapi";
import type { RouteDef } from "../../lib/routes";
import { isPlainObject } from "../../lib/validate";
import { docsAsset, docsHtml, setDocsSecurityHeaders } from "../../runtime/docs-page";
import { metricsText, observeHttp } from "../../runtime/metrics";
import { metricsAuthorized, METRICS_UNAUTHORIZED, PROMETHEUS_TYPE } from "../../runtime/ops-server";
import { emitAudit } from "../../events/audit-shipper";
import { sendJson, sendJsonText } from "./answer";
import { FORM_BODY_LIMIT, JSON_BODY_LIMIT } from "./early-answer";
import type { Ctx, Gateway, Req, Res } from "./gateway";
import { MCP_PATH } from "./mcp";
import { refuseUnknownQuery } from "./query-params";
import type { WebRoute } from "./web";

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
export const API_PAGE = () => docText("page", () => docsHtml("/api-json"));
export const API_JSON = () => docText("json", () => JSON.stringify(openApiDocument()));

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
/** The routes, built with the schema: moleculer-web mounts them in its own `created`, before the gateway's runs. */
export function routeTable(cfg: PlatformConfig, routes: RouteDef[]) {
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
	return [
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
						return this.sendErrorBody(req, res, new ApiError(404, `no API document for '${name.slice(0, 64)}' (services: ${DOC_SERVICES.join(", ")}; the whole API: /api-json)`));
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
	];
}
