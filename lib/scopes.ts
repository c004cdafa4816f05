/**
 * Token scopes (spec: Authentication > Scopes). Pure functions, no I/O.
 *
 * A scope is `{action}:{service}:{collection?}`; `whole` is the wildcard. Matching rules:
 * - `whole` satisfies every scope (and only `whole` satisfies a required `whole`).
 * - The held scope's `service[:collection]` must be a segment-wise prefix of the required one:
 *   `read:identity` satisfies `read:identity:users`, `read:iden` does not. A held final segment `*`
 *   (`read:identity:*`) is the same as omitting it.
 * - Actions elevate only among `manage` ⊇ `write` ⊇ `read`; every other action (send, start, ...)
 *   matches only itself.
 * - A held scope without a service (`read`) or with an empty segment is malformed and satisfies nothing:
 *   a scope never crosses services.
 */

/** Rank of the three elevating actions; other actions have none. */
const ELEVATION: Readonly<Record<string, number>> = Object.freeze({ read: 1, write: 2, manage: 3 });

function rankOf(action: string): number {
	return Object.prototype.hasOwnProperty.call(ELEVATION, action) ? ELEVATION[action] : 0;
}

/** True when holding `held` as an action allows `required` (exact, or elevation manage ⊇ write ⊇ read). */
export function actionSatisfies(held: string, required: string): boolean {
	if (held === required) return true;
	const h = rankOf(held);
	const r = rankOf(required);
	return h > 0 && r > 0 && h >= r;
}

interface HeldScope {
	action: string;
	rank: number;
	/** Segments after the service (the collection, ...); a trailing `*` is dropped. */
	rest: string[];
}

/** The token's scopes split once, grouped by service, for the per-request check. */
export interface ParsedScopes {
	whole: boolean;
	byService: Map<string, HeldScope[]>;
}

function splitHeld(scope: string): { service: string; held: HeldScope } | null {
	const segs = scope.split(":");
	if (segs.length < 2) return null;
	if (segs.length > 2 && segs[segs.length - 1] === "*") segs.pop();
	for (const s of segs) if (s === "" || s === "*") return null;
	const [action, service, ...rest] = segs;
	return { service, held: { action, rank: rankOf(action), rest } };
}

export function parseScopes(scope: string | null | undefined): ParsedScopes {
	const parsed: ParsedScopes = { whole: false, byService: new Map() };
	if (typeof scope !== "string") return parsed;
	for (const s of scope.split(/\s+/)) {
		if (!s) continue;
		if (s === "whole") {
			parsed.whole = true;
			continue;
		}
		const h = splitHeld(s);
		if (!h) continue;
		const list = parsed.byService.get(h.service);
		if (list) list.push(h.held);
		else parsed.byService.set(h.service, [h.held]);
	}
	return parsed;
}

function heldMatches(h: HeldScope, action: string, rank: number, rest: string[]): boolean {
	if (h.action !== action && !(h.rank > 0 && rank > 0 && h.rank >= rank)) return false;
	if (h.rest.length > rest.length) return false;
	for (let i = 0; i < h.rest.length; i++) if (h.rest[i] !== rest[i]) return false;
	return true;
}

/** The hot-path check: does any of the pre-split scopes satisfy `required`? */
export function hasParsedScope(p: ParsedScopes, required: string): boolean {
	if (p.whole) return true;
	if (required === "whole") return false;
	const segs = required.split(":");
	if (segs.length < 2) return false;
	const [action, service, ...rest] = segs;
	const list = p.byService.get(service);
	if (!list) return false;
	const rank = rankOf(action);
	for (const h of list) if (heldMatches(h, action, rank, rest)) return true;
	return false;
}

/** Does the single scope `held` satisfy `required`? */
export function scopeSatisfies(held: string, required: string): boolean {
	if (held === "whole") return true;
	return hasParsedScope(parseScopes(held), required);
}

/** Does the token's space-separated scope claim satisfy `required`? */
export function hasScope(tokenScope: string, required: string): boolean {
	return hasParsedScope(parseScopes(tokenScope), required);
}

/** The scope a handler requires: `action:service:collection` (`action:service` when there is no collection). */
export function requiredScope(action: string, service: string, collection: string): string {
	return collection ? `${action}:${service}:${collection}` : `${action}:${service}`;
}
