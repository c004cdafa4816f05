/**
 * POST /auth/token as OAuth 2.0 clients send it (RFC 6749 §2.3.1, §4, Appendix B): an
 * `application/x-www-form-urlencoded` body, the space-delimited `scope` parameter, and client credentials in an
 * HTTP Basic `Authorization` header. Everything is turned into the JSON body the spec describes, so one parser
 * (services/auth/token-grants.ts) checks both forms with the same messages; the form of a requested scope is here too.
 */
import { ApiError } from "./errors";
import { findCollection, findDomain } from "../catalog";

/** Fields of a token request that the JSON form carries as arrays (a form carries them space-delimited). */
const ARRAY_FIELDS = ["scopes", "subjects", "coworkers"];
const BOOLEAN_FIELDS = ["strict"];

const bad = (message: string) => new ApiError(400, message);

function words(v: string | string[]): string[] {
	return (Array.isArray(v) ? v : [v]).flatMap((s) => String(s).split(/\s+/)).filter(Boolean);
}

export function isFormRequest(contentType: string | undefined): boolean {
	return /^application\/x-www-form-urlencoded\b/i.test(String(contentType ?? "").trim());
}

/**
 * A parsed form (values are strings, or string arrays for repeated keys) as a JSON token request: `strict` as a
 * boolean, `scope`/`scopes`/`subjects`/`coworkers` as arrays of space-delimited words. A parameter given twice
 * is refused (RFC 6749 §3.2: "Request and response parameters MUST NOT be included more than once").
 */
export function tokenRequestFromForm(form: unknown): Record<string, unknown> {
	if (!form || typeof form !== "object" || Array.isArray(form)) return {};
	// `curl -d '{"grant_type": ...}'` without a Content-Type: a JSON text read as a form is one key, the whole body
	// (password included), which must never come back in an error.
	const keys = Object.keys(form);
	if (keys.length === 1 && /^\s*[[{]/.test(keys[0])) throw bad("the body is JSON but its Content-Type is application/x-www-form-urlencoded: send Content-Type: application/json");
	const out: Record<string, unknown> = {};
	for (const [k, v] of Object.entries(form as Record<string, string | string[]>)) {
		if (ARRAY_FIELDS.includes(k)) {
			out[k] = words(v);
			continue;
		}
		if (Array.isArray(v)) throw bad(`${k} must be given once`);
		if (k === "scope") continue;
		if (BOOLEAN_FIELDS.includes(k)) out[k] = v === "true" ? true : v === "false" ? false : v;
		else out[k] = v;
	}
	const scope = (form as Record<string, string | string[]>).scope;
	if (scope !== undefined) {
		if (Array.isArray(scope)) throw bad("scope must be given once");
		if (out.scopes !== undefined) throw bad("give scope or scopes, not both");
		out.scopes = words(scope);
	}
	return out;
}

/**
 * Client credentials from `Authorization: Basic base64(urlencode(client_id):urlencode(client_secret))`
 * (RFC 6749 §2.3.1) merged into the request. A client authenticates one way only: a secret in the body as well is
 * refused, and a client_id in the body must name the same client.
 */
export function withBasicClientAuth(body: Record<string, unknown>, authorization: string | undefined): Record<string, unknown> {
	const m = /^Basic\s+([A-Za-z0-9+/=_-]*)\s*$/i.exec(String(authorization ?? ""));
	if (!m) {
		if (authorization && /^Basic\b/i.test(authorization)) throw bad("Authorization: Basic must carry base64(client_id:client_secret)");
		return body;
	}
	const decoded = Buffer.from(m[1], "base64").toString("utf8");
	const colon = decoded.indexOf(":");
	if (colon < 0) throw bad("Authorization: Basic must carry base64(client_id:client_secret)");
	let id: string, secret: string;
	try {
		id = decodeURIComponent(decoded.slice(0, colon).replace(/\+/g, " "));
		secret = decodeURIComponent(decoded.slice(colon + 1).replace(/\+/g, " "));
	} catch {
		throw bad("Authorization: Basic must carry base64(client_id:client_secret)");
	}
	if (body.client_secret !== undefined) throw bad("client credentials are given twice (Authorization: Basic and client_secret): use one");
	if (body.client_id !== undefined && body.client_id !== id) throw bad("client_id differs from the client of Authorization: Basic");
	return { ...body, client_id: id, ...(secret ? { client_secret: secret } : {}) };
}

/** A requested scope: `<action>:<service>[:<collection>|*]` of the catalog, or `whole`. */
const SCOPE_RE = /^([a-z][a-z0-9_-]{0,31}):([a-z][a-z0-9-]{0,63})(?::([a-z][a-z0-9-]{0,63}|\*))?$/;
export const SCOPE_PATTERN = `^(whole|${SCOPE_RE.source.slice(1, -1)})$`;

/**
 * Why the requested scope at `where` is not a scope, or null. The value is not repeated (a token request's values
 * stay out of its errors): the message names the position and the form.
 */
export function requestedScopeProblem(scope: string, where: string): string | null {
	if (scope === "whole") return null;
	const m = SCOPE_RE.exec(scope);
	if (!m) return `${where} is not a scope: use <action>:<service>[:<collection>] (e.g. read:content:notes) or whole`;
	if (!findDomain(m[2])) return `${where} names an unknown service`;
	if (m[3] !== undefined && m[3] !== "*" && !findCollection(m[2], m[3])) return `${where} names an unknown collection of ${m[2]}`;
	return null;
}
