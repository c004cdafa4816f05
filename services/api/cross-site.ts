/**
 * Cross-site request refusal (docs/security.md, "Cross-site requests"). A browser attaches the `authorization` cookie
 * to requests other sites make it send (a form, an image, a fetch with credentials), so a request authenticated by
 * that cookie which changes state (lib/routes.ts `changesState`) is refused with 403 when it comes from another site:
 * `Sec-Fetch-Site: cross-site`, or an `Origin` whose host is not the request's own (`Host`; with TRUST_PROXY the
 * first `X-Forwarded-Host` when present). A bearer in the `Authorization` header or in `?token=` is never attached by a
 * browser on its own: those requests are not concerned.
 */
import type { IncomingMessage } from "http";
import { ApiError } from "../../lib/errors";
import { changesState, type RouteDef } from "../../lib/routes";
import { bearerOf } from "../../authority/authenticate";

type Req = IncomingMessage & { query?: Record<string, unknown> };

export const CROSS_SITE_REFUSED =
	"cross-site request refused: a request authenticated by cookie that changes state must come from this site (send the token in the Authorization header instead)";

const first = (v: string | string[] | undefined): string | undefined => (Array.isArray(v) ? v[0] : v)?.split(",")[0]?.trim() || undefined;

/** The bearer comes from the `authorization` cookie: neither the header nor `?token=` carries one. */
function cookieAuthenticated(req: Req): boolean {
	if (typeof req.headers.cookie !== "string") return false;
	return bearerOf({ headers: { ...req.headers, cookie: undefined }, query: req.query }) === undefined && bearerOf(req) !== undefined;
}

/** The request was made for another site: Sec-Fetch-Site says so, or Origin names another host (an opaque `null` too). */
function fromAnotherSite(req: Req, trustProxy: boolean): boolean {
	if (first(req.headers["sec-fetch-site"])?.toLowerCase() === "cross-site") return true;
	const origin = first(req.headers.origin);
	if (origin === undefined) return false;
	const own = (trustProxy && first(req.headers["x-forwarded-host"])) || first(req.headers.host);
	try {
		const o = new URL(origin);
		// The request's host as the origin's scheme writes it (a default port dropped), compared case-insensitively.
		return own === undefined || new URL(`${o.protocol}//${own}`).host !== o.host;
	} catch {
		return true; // `null` (a sandboxed or privacy-sensitive context) or no URL at all
	}
}

/** The paths of the GET routes that change state (`GET /auth/logout`, saga and transaction actions). */
export function actingGets(routes: RouteDef[]): Set<string> {
	return new Set(routes.filter((r) => r.method === "GET" && changesState(r)).map((r) => r.path));
}

/** Throws 403 for a cookie-authenticated request that changes state and comes from another site. */
export function refuseCrossSiteCookie(req: Req, aliasPath: string | undefined, gets: Set<string>, trustProxy: boolean): void {
	const acting = (req.method !== "GET" && req.method !== "HEAD") || (aliasPath !== undefined && gets.has(aliasPath));
	if (acting && cookieAuthenticated(req) && fromAnotherSite(req, trustProxy)) throw new ApiError(403, CROSS_SITE_REFUSED);
}
