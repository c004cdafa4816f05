/**
 * The media type of a request body, checked before the body is read as a document: the gateway's JSON parser reads
 * only `application/json` (and the token route also `application/x-www-form-urlencoded`), and anything else used to
 * reach the action as an empty body (`title is required`, `grant_type is required`), which hid the real mistake.
 */
import { ApiError } from "./errors";

export type BodyMedia = "json" | "json-or-form";

export const JSON_TYPE = /^application\/json\s*(;|$)/i;
export const FORM_TYPE = /^application\/x-www-form-urlencoded\s*(;|$)/i;
const BODY_METHODS = new Set(["POST", "PUT", "PATCH"]);

interface ReqLike {
	method?: string;
	headers: Record<string, string | string[] | undefined>;
}

/** Whether the request comes with a body (chunked, or a length above zero). */
export function carriesBody(req: ReqLike): boolean {
	if (req.headers["transfer-encoding"] !== undefined) return true;
	const n = Number(req.headers["content-length"]);
	return Number.isFinite(n) && n > 0;
}

/**
 * 400 when a body comes without `Content-Type`, 415 when it comes as a type the route does not read; nothing for a
 * request without a body.
 */
export function assertBodyMedia(req: ReqLike, accepts: BodyMedia): void {
	if (!BODY_METHODS.has(String(req.method ?? "").toUpperCase()) || !carriesBody(req)) return;
	const raw = req.headers["content-type"];
	const type = String(Array.isArray(raw) ? raw[0] : (raw ?? "")).trim();
	const wanted = accepts === "json" ? "application/json" : "application/json or application/x-www-form-urlencoded";
	if (!type) throw new ApiError(400, `content-type is missing: send the body with Content-Type: ${wanted}`);
	if (JSON_TYPE.test(type) || (accepts === "json-or-form" && FORM_TYPE.test(type))) return;
	const hint = FORM_TYPE.test(type) ? " (curl -d sends a form: add -H 'Content-Type: application/json')" : "";
	const what = accepts === "json" ? "a JSON body" : "a JSON or form body";
	throw new ApiError(415, `this endpoint reads ${what}: send Content-Type: ${wanted}, not ${type.split(";")[0].slice(0, 100)}${hint}`);
}
