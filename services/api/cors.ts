/**
 * Cross-origin requests from browsers (docs/api.md, "Browsers on another origin"). `CORS_ORIGINS` lists the exact
 * origins (`scheme://host[:port]`) whose pages may call the API; none by default.
 *
 * - A preflight (`OPTIONS` with `Access-Control-Request-Method`) is answered here, before authentication: 204 with the
 *   methods and request headers the API reads, for a listed origin; 403 naming the origin and the setting otherwise
 *   (a browser sends no credentials on a preflight, so it never reached anything but a 401 before).
 * - Every other answer to a listed origin carries `Access-Control-Allow-Origin: <that origin>` (never `*`),
 *   `Access-Control-Allow-Credentials: true` and the response headers a client reads exposed; `Vary: Origin` always,
 *   so a cache never hands one origin's answer to another.
 * - An origin that is not listed gets no CORS header: its page cannot read the answer (the browser's refusal). What the
 *   request itself may do is decided as for any request (token, scopes, grants); a cookie-authenticated request that
 *   changes state is accepted from a listed origin only (services/api/cross-site.ts).
 */
import type { IncomingMessage, ServerResponse } from "http";
import { ApiError } from "../../lib/errors";

/** The request headers the API reads (Content-Type and the other CORS-safelisted ones need no mention, but cost nothing). */
export const CORS_ALLOWED_HEADERS = [
	"Authorization",
	"Content-Type",
	"Idempotency-Key",
	"If-Match",
	"If-None-Match",
	"Last-Event-ID",
	"X-Zone",
	"X-Exclude-Soft-Delete-Query",
	"X-Saga-Session",
	"X-Can-With-Policies",
	"X-Can-With-Id-Policies",
	"X-Request-ID",
	"X-Correlation-ID",
	"Mcp-Session-Id",
	"MCP-Protocol-Version",
];
/** The response headers a page may read besides the safelisted ones. */
export const CORS_EXPOSED_HEADERS = [
	"ETag",
	"Retry-After",
	"Idempotent-Replayed",
	"Location",
	"X-Request-ID",
	"X-Saga-Session",
	"Content-Disposition",
	"WWW-Authenticate",
	"Mcp-Session-Id",
];
const METHODS = "GET, HEAD, POST, PUT, PATCH, DELETE";
/** Seconds a browser may keep a preflight's answer. */
const PREFLIGHT_MAX_AGE_S = 600;

export class Cors {
	private readonly allowed: Set<string>;
	constructor(origins: readonly string[]) {
		this.allowed = new Set(origins);
	}

	/** The request's origin when it is a listed one. */
	listed(req: Pick<IncomingMessage, "headers">): string | undefined {
		const o = req.headers.origin;
		return typeof o === "string" && this.allowed.has(o) ? o : undefined;
	}

	/**
	 * Sets the CORS headers of this request's answer; answers a preflight itself. True when the request is answered
	 * (a preflight), false when it goes on.
	 */
	handle(req: IncomingMessage, res: ServerResponse, refuse: (err: ApiError) => void): boolean {
		res.setHeader("Vary", "Origin");
		const origin = this.listed(req);
		const preflight = req.method === "OPTIONS" && req.headers["access-control-request-method"] !== undefined;
		if (origin) {
			res.setHeader("Access-Control-Allow-Origin", origin);
			res.setHeader("Access-Control-Allow-Credentials", "true");
			if (!preflight) res.setHeader("Access-Control-Expose-Headers", CORS_EXPOSED_HEADERS.join(", "));
		}
		if (!preflight) return false;
		if (!origin) {
			const named = typeof req.headers.origin === "string" ? req.headers.origin.slice(0, 200) : "(none)";
			refuse(new ApiError(403, `origin ${named} is not allowed: list it in CORS_ORIGINS to call the API from its pages`));
			return true;
		}
		res.writeHead(204, {
			"Access-Control-Allow-Methods": METHODS,
			"Access-Control-Allow-Headers": CORS_ALLOWED_HEADERS.join(", "),
			"Access-Control-Max-Age": String(PREFLIGHT_MAX_AGE_S),
			"Content-Length": "0",
		});
		res.end();
		return true;
	}
}
