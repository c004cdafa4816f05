/**
 * Zones and the `groups` reduction of query enforcement (spec: Authorization > Query enforcement, Zones;
 * docs/contracts.md "Queries and responses"). Pure functions producing conditions of the query language (lib/query.ts).
 */
import { badRequest } from "./errors";
import { parseZones } from "./query-safety";
import { identityOf, TokenClaims } from "./types";

/**
 * The automatic condition of the listed zones, combined by OR (a single zone is not wrapped in `$or`).
 * own → `{owner: identity}`, share → `{shares: identity}` (array-contains by equality), group →
 * `{groups: {$in: token.groups}, "clients.0": token.cid}` — a group acts only in its tenant, the document's tenant being
 * the first entry of its `clients` (a token without groups gets `$in: []`: nothing matches) — client →
 * `{clients: token.cid}`. Identity is uid, else aid, else cid. Zones are read by query-safety's `parseZones`:
 * an empty list means the default `own,share`, an unknown zone name answers 400.
 */
export function zoneFilter(zones: string[], token: TokenClaims): Record<string, unknown> {
	const list = parseZones(zones);
	const identity = identityOf(token);
	const conds = list.map((z): Record<string, unknown> => {
		switch (z) {
			case "own":
				return { owner: identity };
			case "share":
				return { shares: identity };
			case "group":
				// `clients.0` is the first array element (a missing or empty `clients` matches nothing).
				// A token without a client has no tenant: nothing matches.
				if (typeof token.cid !== "string" || !token.cid) return { groups: { $in: [] } };
				return { groups: { $in: Array.isArray(token.groups) ? [...token.groups] : [] }, "clients.0": token.cid };
			case "client":
				return { clients: token.cid };
			default:
				throw badRequest(`unknown zone ${z}`);
		}
	});
	return conds.length === 1 ? conds[0] : { $or: conds };
}

const isPlainObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

const NOTHING = (): Record<string, unknown> => ({ $in: [] });

/**
 * Reduces the value of a `groups` key of a user query to the caller's own memberships; other groups are
 * dropped silently. Forms handled: a group name, an array (exact-array equality, kept as a reduced array),
 * and an operator object whose `$in`, `$all`, `$eq`, `$nin`, `$ne` are reduced the same way. Any other
 * operator (`$regex`, `$exists`, `$elemMatch`, `$size`, `$not`, ...) could probe foreign group names and is
 * dropped. When nothing remains, or a positive operator (`$in`, `$all`, `$eq`, a name, an array) is left
 * with no member, the result is `{ $in: [] }`, which matches no document.
 */
export function reduceGroups(value: unknown, memberships: string[]): unknown {
	const mine = new Set(Array.isArray(memberships) ? memberships.filter((m) => typeof m === "string") : []);
	const keep = (v: unknown): v is string => typeof v === "string" && mine.has(v);
	if (typeof value === "string") return keep(value) ? value : NOTHING();
	if (Array.isArray(value)) {
		const kept = value.filter(keep);
		return kept.length ? kept : NOTHING();
	}
	if (!isPlainObject(value)) return NOTHING();
	const out: Record<string, unknown> = {};
	for (const [op, arg] of Object.entries(value)) {
		switch (op) {
			case "$in":
			case "$all": {
				const kept = (Array.isArray(arg) ? arg : [arg]).filter(keep);
				if (!kept.length) return NOTHING();
				out[op] = kept;
				break;
			}
			case "$eq":
				if (!keep(arg)) return NOTHING();
				out.$eq = arg;
				break;
			case "$nin": {
				const kept = (Array.isArray(arg) ? arg : [arg]).filter(keep);
				if (kept.length) out.$nin = kept;
				break;
			}
			case "$ne":
				if (keep(arg)) out.$ne = arg;
				break;
			default:
				// Dropped: not a plain membership test.
				break;
		}
	}
	return Object.keys(out).length ? out : NOTHING();
}

const LOGICAL = new Set(["$or", "$and", "$nor"]);

const isGroupsKey = (k: string) => k === "groups" || k.startsWith("groups.");

/**
 * Returns a copy of `filter` in which every `groups` key (also dotted `groups.<n>`) at the top level or
 * nested in `$or`/`$and`/`$nor` (and a query-level `$not`) has its value reduced by `reduceGroups`. The input is not mutated.
 */
export function reduceGroupsInQuery(filter: Record<string, unknown>, memberships: string[]): Record<string, unknown> {
	if (!isPlainObject(filter)) return filter;
	const out: Record<string, unknown> = {};
	for (const [k, v] of Object.entries(filter)) {
		if (isGroupsKey(k)) out[k] = reduceGroups(v, memberships);
		else if (LOGICAL.has(k) && Array.isArray(v)) out[k] = v.map((c) => (isPlainObject(c) ? reduceGroupsInQuery(c, memberships) : c));
		else if (k === "$not" && isPlainObject(v)) out[k] = reduceGroupsInQuery(v, memberships);
		else out[k] = v;
	}
	return out;
}
