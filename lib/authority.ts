/**
 * The authority layer's decisions, pure (spec: Authorization; docs/contracts.md "Queries and responses"): the scope,
 * the grant, then query enforcement, producing the access plan the collection engine executes. They read plain values
 * (the token, the grant index, the request's parameters and headers) and throw the refusal a caller sees (400, 403,
 * 404); authority/authority.ts applies them to every collection call, authority/delivery.ts to every push.
 */
import { findCollection, PLATFORM_FIELDS, SETTABLE_FIELDS, type CollectionDef, type StandardOp } from "../catalog";
import { ApiError, forbidden, notFound } from "./errors";
import { fieldsAllowed, type Decision, type GrantIndex } from "./grants";
import type { AccessPlan } from "./plan";
import { parsePagination, parsePopulate, parseProjection, parseQuery, parseZones, neverQueried, referencedFields, type Filter, type PopulateSpec } from "./query-safety";
import { hasParsedScope, parseScopes, type ParsedScopes } from "./scopes";
import type { TokenClaims } from "./types";
import { reduceGroupsInQuery, zoneFilter } from "./zones";

const OBJECT_ID = /^[0-9a-f]{24}$/i;
const READ_OPS = new Set<string>(["list", "count", "cursor", "get"]);
const BY_ID_OPS = new Set<string>(["get", "patch", "remove", "restore", "destroy"]);
const WRITE_BODY_OPS = new Set<string>(["create", "bulkCreate", "patch", "bulkPatch"]);

/** Parsed scopes per scope string: tokens repeat, parsing need not. */
const scopeCache = new Map<string, ParsedScopes>();
function scopesOf(scope: string): ParsedScopes {
	let p = scopeCache.get(scope);
	if (!p) {
		if (scopeCache.size > 10_000) scopeCache.clear();
		scopeCache.set(scope, (p = parseScopes(scope)));
	}
	return p;
}

export function subjectsOf(token: TokenClaims): string[] {
	return token.subject ? token.subject.split(" ").filter(Boolean) : [];
}

/** Layer 1: the token's scope must cover `{level}:{service}:{collection}`; 403 before any grant lookup. */
export function checkScope(token: TokenClaims, action: string, service: string, collection: string): void {
	const required = `${action}:${service}:${collection}`;
	if (!hasParsedScope(scopesOf(token.scope ?? ""), required)) throw forbidden(`token scope does not cover ${required}`);
}

/** Layer 2: a grant for the action on `service:collection` (or `service:*`); 403 otherwise. */
export function checkGrant(index: GrantIndex, token: TokenClaims, action: string, object: string, ip?: string): Decision {
	const d = index.decide({ subjects: subjectsOf(token), action, object, ip, tz: token.tz, token });
	if (!d.granted) {
		if (d.reason === "location") throw forbidden(`request ip is outside the grant location`);
		if (d.reason === "time") throw forbidden(`request is outside the grant time window`);
		throw forbidden(`no grant for ${action} on ${object}`);
	}
	return d;
}

function refuseHidden(referenced: string[], allowed: string[] | null, what: string): void {
	const hidden = fieldsAllowed(referenced, allowed);
	if (hidden.length) throw forbidden(`${what} ${hidden[0]} is not allowed`);
}

/** 403 like a hidden field, whatever the grants say. */
function refuseNeverQueried(col: CollectionDef, referenced: string[], what: string): void {
	const bad = referenced.find((f) => neverQueried(col, f));
	if (bad !== undefined) throw forbidden(`${what} ${bad} is not allowed`);
}

/**
 * AND of conditions, flattened into one object where keys do not collide (the SQL translation reads the owner zone
 * from top-level conditions, pg.query.ts ownerSplit), the most selective condition (id/ref) last and top-level.
 * Colliding keys keep their meaning inside `$and`.
 */
export function and(parts: Array<Filter | null | undefined>): Filter {
	const out: Filter = {};
	const rest: Filter[] = [];
	for (const p of parts) {
		if (!p) continue;
		for (const [k, v] of Object.entries(p)) {
			if (k === "$and" && Array.isArray(v)) rest.push(...(v as Filter[]));
			else if (Object.prototype.hasOwnProperty.call(out, k)) rest.push({ [k]: v });
			else out[k] = v;
		}
	}
	if (!rest.length) return out;
	// Keep the id/ref condition last among the top-level keys.
	const { id, ref, ...others } = out as Record<string, unknown>;
	return { ...others, $and: rest, ...(ref !== undefined ? { ref } : {}), ...(id !== undefined ? { id } : {}) };
}

/** What query enforcement reads of one call: the values the gateway took from the request, raw. */
export interface EnforceRequest {
	/** The query-string parameters (`query`, `pagination`, `projection`, `populate`, `zone`, `ref`): JSON text or qs objects. */
	query?: Record<string, unknown>;
	/** The path's `:id` (get, patch, remove, restore, destroy). */
	id?: unknown;
	/** The body of a create, bulk create, patch or bulk patch. */
	body?: unknown;
	/** Lower-cased request headers: `x-zone`, `x-exclude-soft-delete-query`. */
	headers?: Record<string, string | undefined>;
	/** The caller's address: the grants of a populated target may be restricted to a location. */
	ip?: string;
}

/** Layer 3: query enforcement. Returns the plan; every referenced field must be readable. */
export function enforce(req: EnforceRequest, index: GrantIndex, col: CollectionDef, op: StandardOp, decision: Decision, token: TokenClaims): AccessPlan {
	const q = req.query ?? {};
	const headers = req.headers ?? {};
	const allowed = decision.fields;
	const isRead = READ_OPS.has(op) || op === "bulkPatch";

	// The parsers take the raw parameters (strings, or qs objects) and parse JSON themselves, once.
	const userQuery = isRead ? reduceGroupsInQuery(parseQuery(q.query), token.groups ?? []) : {};
	const pagination = op === "list" || op === "cursor" ? parsePagination(q.pagination) : undefined;
	const projection = op === "list" || op === "cursor" || op === "get" ? parseProjection(q.projection) : undefined;
	let populate: PopulateSpec[] = op === "list" || op === "cursor" || op === "get" ? parsePopulate(q.populate) : [];

	refuseNeverQueried(col, referencedFields(userQuery), "query field");
	if (pagination?.sort) refuseNeverQueried(col, Object.keys(pagination.sort), "sort field");
	if (projection) refuseNeverQueried(col, Object.keys(projection), "projection field");
	for (const p of populate) {
		refuseNeverQueried(col, [p.path], "populate path");
		// match and select name fields of the target collection: the nested call would refuse them too, but not when
		// it is dropped for want of a grant; refused here whatever the grants say.
		const rel = col.fields[p.path]?.relation?.split("/");
		const target = rel ? findCollection(rel[0], rel[1])?.collection : undefined;
		if (target && p.match) refuseNeverQueried(target, referencedFields(p.match), "query field");
		if (target && p.select) refuseNeverQueried(target, p.select, "projection field");
	}
	refuseHidden(referencedFields(userQuery), allowed, "query field");
	if (pagination?.sort) refuseHidden(Object.keys(pagination.sort), allowed, "sort field");
	if (projection) refuseHidden(Object.keys(projection), allowed, "projection field");
	if (populate.length) {
		for (const p of populate) if (!col.fields[p.path]?.relation) throw new ApiError(400, `${p.path} cannot be populated`);
		refuseHidden(
			populate.map((p) => p.path),
			allowed,
			"populate path",
		);
		// Paths whose target the caller holds no read grant for are dropped silently; the nested call re-checks all.
		populate = populate.filter((p) => {
			const [svc, target] = col.fields[p.path].relation!.split("/");
			return (
				hasParsedScope(scopesOf(token.scope ?? ""), `read:${svc}:${target}`) &&
				index.decide({ subjects: subjectsOf(token), action: "read", object: `${svc}:${target}`, ip: req.ip, tz: token.tz, token }).granted
			);
		});
	}
	if (WRITE_BODY_OPS.has(op)) {
		const body = req.body as Record<string, unknown> | undefined;
		const items = op === "bulkCreate" && Array.isArray(body?.items) ? (body!.items as unknown[]) : [body];
		for (const it of items) if (it && typeof it === "object") refuseHidden(Object.keys(it), allowed, "field");
	}

	// The soft-delete condition, unless the header; restore and destroy address soft-deleted documents too.
	const softDelete = op === "restore" || op === "destroy" || headers["x-exclude-soft-delete-query"] !== undefined ? null : { deleted_at: null };
	const zones = zoneFilter(parseZones(q.zone ?? headers["x-zone"]), token);

	let idCond: Filter | null = null;
	if (BY_ID_OPS.has(op)) {
		const id = req.id;
		const byRef = op === "get" && (q.ref === "true" || q.ref === true);
		if (typeof id !== "string" || (!byRef && !OBJECT_ID.test(id))) throw notFound();
		// A lookup by ref is a condition on the `ref` field: like any query field it must be readable.
		if (byRef) refuseHidden(["ref"], allowed, "query field");
		idCond = byRef ? { ref: id } : { id: id.toLowerCase() };
	}

	// Response fields: the grant's allowlist narrowed by an inclusion projection, minus an exclusion projection.
	let fields = allowed;
	if (projection) {
		const keys = Object.keys(projection);
		if (Object.values(projection)[0] === 1) fields = keys.filter((k) => !allowed || allowed.includes(k) || allowed.includes(k.split(".")[0]));
		else fields = (allowed ?? [...Object.keys(col.fields), ...COMMON_OUTPUT]).filter((f) => !keys.includes(f));
	}

	return {
		filter: and([softDelete, zones, decision.rowFilter, userQuery, idCond]),
		fields,
		sort: pagination?.sort,
		skip: pagination?.skip ?? 0,
		limit: pagination?.limit ?? 10,
		populate,
		token,
		// Every document a write leaves behind must stay inside the grant's rows (checked by the engine).
		...(WRITE_BODY_OPS.has(op) && decision.rowFilter ? { writeFilter: decision.rowFilter } : {}),
	};
}

/** Every common field a document can return (the catalog's platform and settable fields), `id` excepted. */
const COMMON_OUTPUT = [...Object.keys(PLATFORM_FIELDS), ...Object.keys(SETTABLE_FIELDS)].filter((f) => f !== "id");
