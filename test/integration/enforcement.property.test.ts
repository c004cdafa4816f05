/**
 * Property: for random documents, grants (row filters, field lists, locations, several subjects and objects), tokens,
 * user queries, zones and the soft-delete header, the documents the real pipeline returns — `checkGrant` and
 * `enforce()` of the authority middleware, then the query language in memory (lib/query.ts, whose agreement with the
 * SQL translation is test/integration/query-sql.property.test.ts) and the platform's PostgreSQL store — are exactly those an independent evaluator says
 * satisfy soft delete ∧ zones ∧ row filter ∧ query; in particular never one outside zones ∧ row filter. Requests the
 * evaluator says must be refused (no applicable grant, a query field outside the allowlist) are refused with 403.
 *
 * The evaluator works on the generated condition trees with the document-store (MongoDB) semantics of the spec's
 * "document-store query notation"; it never looks at the filters the pipeline builds.
 */
import fc from "fast-check";
import { findCollection } from "../../catalog";
import { GrantIndex, validateGrant, type Grant } from "../../lib/grants";
import type { TokenClaims } from "../../lib/types";
import { checkGrant, enforce } from "../../authority/authority";
import type { CollectionActionMeta } from "../../engine/collection.mixin";
import { platformDoc } from "../../engine/collection.mixin";
import { type DocumentStore, type StoredDoc } from "../../stores";
import { matches } from "../../lib/query";
import { grantCache } from "../../authority/grant-cache";
import { bootPlatform, type TestPlatform } from "../helpers/platform";
import { withStatusProbe } from "../helpers/status-probe";

const DOMAIN = "d.example";
const OBJECT = "logistic:locations";
const col = findCollection("logistic", "locations")!.collection;

const hex = (c: string, i: number) => c.repeat(23) + String(i);
const USERS = [1, 2, 3].map((i) => hex("a", i));
const CLIENTS = [1, 2].map((i) => hex("c", i));
const IDENTITIES = [...USERS, ...CLIENTS];
const GROUPS = ["team@example.com", "ops.example.com", "other@example.com"];
const NAMES = ["alpha", "Beta", "gamma", "delta", "alphabet"];
const ADDRESSES = ["north", "south"];
const TAGS = ["x", "y", "z"];
const DEPTS = ["north", "sales"];
const DOC_IDS = Array.from({ length: 12 }, (_, i) => (i + 10).toString(16).padStart(24, "0"));
const UNKNOWN_ID = "f".repeat(24);
const ZONES = ["own", "share", "group", "client"] as const;
type ZoneName = (typeof ZONES)[number];

// ---------------------------------------------------------------------------------------------------------------
// Condition trees, their JSON rendering and their independent evaluation
// ---------------------------------------------------------------------------------------------------------------

type Var = { var: "uid" | "cid" | "department" };
type Scalar = string | number | Var;
type Leaf =
	| { f: string; op: "eq"; v: Scalar; form: "plain" | "$eq" }
	| { f: string; op: "ne" | "gt" | "gte" | "lt" | "lte"; v: Scalar }
	| { f: string; op: "in" | "nin"; v: Scalar[] }
	| { f: string; op: "exists"; v: boolean }
	| { f: string; op: "regex"; v: string; i: boolean }
	| { f: string; op: "size"; v: number };
type Node = Leaf | { or: Node[] } | { and: Node[] } | { not: Node } | { never: true };

const isVar = (v: unknown): v is Var => typeof v === "object" && v !== null && "var" in v;
const renderScalar = (v: Scalar) => (isVar(v) ? `{{token.${v.var}}}` : v);
const OPS: Record<string, string> = { ne: "$ne", gt: "$gt", gte: "$gte", lt: "$lt", lte: "$lte", in: "$in", nin: "$nin", exists: "$exists", size: "$size" };

function render(n: Node): Record<string, unknown> {
	if ("or" in n) return { $or: n.or.map(render) };
	if ("and" in n) return { $and: n.and.map(render) };
	if ("not" in n) return { $not: render(n.not) };
	if ("never" in n) throw new Error("never is evaluator-only");
	switch (n.op) {
		case "eq":
			return { [n.f]: n.form === "$eq" ? { $eq: renderScalar(n.v) } : renderScalar(n.v) };
		case "in":
		case "nin":
			return { [n.f]: { [OPS[n.op]]: n.v.map(renderScalar) } };
		case "regex":
			return { [n.f]: n.i ? { $regex: n.v, $options: "i" } : { $regex: n.v } };
		default:
			return { [n.f]: { [OPS[n.op]]: isVar(n.v) ? renderScalar(n.v) : n.v } };
	}
}

const MISSING = Symbol("missing");
type Claims = Record<string, unknown>;

function resolve(v: Scalar, token: Claims): string | number | typeof MISSING {
	if (!isVar(v)) return v;
	const c = token[v.var];
	return typeof c === "string" || typeof c === "number" ? c : MISSING;
}

/** Whether any `{{token.x}}` of the tree names a claim the token lacks (then the whole filter entry matches nothing). */
function missingVar(n: Node, token: Claims): boolean {
	if ("or" in n) return n.or.some((c) => missingVar(c, token));
	if ("and" in n) return n.and.some((c) => missingVar(c, token));
	if ("not" in n) return missingVar(n.not, token);
	if ("never" in n) return false;
	if (n.op === "in" || n.op === "nin") return n.v.some((x) => resolve(x, token) === MISSING);
	if (n.op === "eq" || n.op === "ne" || n.op === "gt" || n.op === "gte" || n.op === "lt" || n.op === "lte") return resolve(n.v, token) === MISSING;
	return false;
}

/** MongoDB semantics: a condition on an array field holds when some element satisfies it; $ne/$nin when none equals. */
function evaluate(n: Node, doc: Record<string, unknown>, token: Claims): boolean {
	if ("or" in n) return n.or.some((c) => evaluate(c, doc, token));
	if ("and" in n) return n.and.every((c) => evaluate(c, doc, token));
	if ("not" in n) return !evaluate(n.not, doc, token);
	if ("never" in n) return false;
	const v = doc[n.f];
	const elems: unknown[] = Array.isArray(v) ? v : v === undefined ? [] : [v];
	const eq = (x: unknown) => elems.some((e) => e === x);
	const cmp = (x: unknown, f: (a: any, b: any) => boolean) => elems.some((e) => (typeof e === "number" || typeof e === "string") && typeof e === typeof x && f(e, x));
	switch (n.op) {
		case "eq":
			return eq(resolve(n.v, token));
		case "ne":
			return !eq(resolve(n.v, token));
		case "gt":
			return cmp(resolve(n.v, token), (a, b) => a > b);
		case "gte":
			return cmp(resolve(n.v, token), (a, b) => a >= b);
		case "lt":
			return cmp(resolve(n.v, token), (a, b) => a < b);
		case "lte":
			return cmp(resolve(n.v, token), (a, b) => a <= b);
		case "in":
			return n.v.some((x) => eq(resolve(x, token)));
		case "nin":
			return !n.v.some((x) => eq(resolve(x, token)));
		case "exists":
			return (v !== undefined) === n.v;
		case "regex": {
			const re = new RegExp(n.v, n.i ? "i" : "");
			return elems.some((e) => typeof e === "string" && re.test(e));
		}
		case "size":
			return Array.isArray(v) && v.length === n.v;
	}
}

function fieldsOf(n: Node, out = new Set<string>()): Set<string> {
	if ("or" in n) n.or.forEach((c) => fieldsOf(c, out));
	else if ("and" in n) n.and.forEach((c) => fieldsOf(c, out));
	else if ("not" in n) fieldsOf(n.not, out);
	else if (!("never" in n)) out.add(n.f);
	return out;
}

/** The spec's groups rule: a group name the caller is not a member of is removed; nothing left matches nothing. */
function reduceGroups(n: Node, memberships: string[]): Node {
	if ("or" in n) return { or: n.or.map((c) => reduceGroups(c, memberships)) };
	if ("and" in n) return { and: n.and.map((c) => reduceGroups(c, memberships)) };
	if ("not" in n) return { not: reduceGroups(n.not, memberships) };
	if ("never" in n || n.f !== "groups") return n;
	if (n.op === "eq") return memberships.includes(n.v as string) ? n : { never: true };
	if (n.op === "in") {
		const kept = n.v.filter((g) => memberships.includes(g as string));
		return kept.length ? { ...n, v: kept } : { never: true };
	}
	throw new Error(`groups condition ${n.op} is not generated in user queries`);
}

// ---------------------------------------------------------------------------------------------------------------
// Generators
// ---------------------------------------------------------------------------------------------------------------

const varArb = (names: Array<Var["var"]>): fc.Arbitrary<Var> => fc.constantFrom(...names).map((v) => ({ var: v }));

/** Leaves on one field with values of its type; `vars` adds token variables (grant filters only). */
function leafArb(withVars: boolean, userQuery: boolean): fc.Arbitrary<Leaf> {
	const str = (vals: string[], vars: Array<Var["var"]>): fc.Arbitrary<Scalar> =>
		withVars && vars.length ? fc.oneof({ weight: 3, arbitrary: fc.constantFrom(...vals) }, { weight: 1, arbitrary: varArb(vars) }) : fc.constantFrom(...vals);
	const scalarLeaves = (f: string, vals: fc.Arbitrary<Scalar>, ordered: boolean): fc.Arbitrary<Leaf>[] => [
		fc.record({ f: fc.constant(f), op: fc.constant("eq" as const), v: vals, form: fc.constantFrom("plain" as const, "$eq" as const) }),
		fc.record({ f: fc.constant(f), op: fc.constant("ne" as const), v: vals }),
		fc.record({ f: fc.constant(f), op: fc.constantFrom("in" as const, "nin" as const), v: fc.array(vals, { minLength: 1, maxLength: 3 }) }),
		fc.record({ f: fc.constant(f), op: fc.constant("exists" as const), v: fc.boolean() }),
		...(ordered ? [fc.record({ f: fc.constant(f), op: fc.constantFrom("gt" as const, "gte" as const, "lt" as const, "lte" as const), v: vals })] : []),
	];
	const leaves: fc.Arbitrary<Leaf>[] = [
		...scalarLeaves("name", str(NAMES, []), true),
		fc.record({ f: fc.constant("name"), op: fc.constant("regex" as const), v: fc.constantFrom("^a", "a$", "^b", "ph", "^g.m"), i: fc.boolean() }),
		...scalarLeaves("lat", fc.integer({ min: -3, max: 3 }), true),
		...scalarLeaves("address", str(ADDRESSES, ["department"]), false),
		...scalarLeaves("tags", fc.constantFrom(...TAGS), false),
		fc.record({ f: fc.constant("tags"), op: fc.constant("size" as const), v: fc.integer({ min: 0, max: 2 }) }),
		fc.record({ f: fc.constant("owner"), op: fc.constant("eq" as const), v: str(IDENTITIES, ["uid", "cid"]), form: fc.constant("plain" as const) }),
		fc.record({ f: fc.constant("shares"), op: fc.constantFrom("eq" as const), v: str(IDENTITIES, ["uid"]), form: fc.constant("plain" as const) }),
		fc.record({ f: fc.constant("id"), op: fc.constantFrom("in" as const, "nin" as const), v: fc.subarray([...DOC_IDS.slice(0, 6), UNKNOWN_ID], { minLength: 1, maxLength: 3 }) }),
		fc.record({ f: fc.constant("id"), op: fc.constantFrom("eq" as const), v: fc.constantFrom(...DOC_IDS.slice(0, 6)), form: fc.constant("plain" as const) }),
		fc.record({ f: fc.constant("id"), op: fc.constant("ne" as const), v: fc.constantFrom(...DOC_IDS.slice(0, 6)) }),
	];
	// Groups: membership tests in user queries (the spec reduces them), any form in grant filters.
	if (userQuery)
		leaves.push(
			fc.record({ f: fc.constant("groups"), op: fc.constant("eq" as const), v: fc.constantFrom(...GROUPS), form: fc.constant("plain" as const) }),
			fc.record({ f: fc.constant("groups"), op: fc.constant("in" as const), v: fc.subarray(GROUPS, { minLength: 1 }) }),
		);
	else leaves.push(...scalarLeaves("groups", fc.constantFrom(...GROUPS), false), ...scalarLeaves("clients", str(CLIENTS, ["cid"]), false));
	return fc.oneof(...leaves);
}

function nodeArb(withVars: boolean, userQuery: boolean): fc.Arbitrary<Node> {
	const leaf = leafArb(withVars, userQuery);
	const { node } = fc.letrec<{ node: Node }>((tie) => ({
		node: fc.oneof(
			// Two logical levels above a leaf: within the query depth limit of query-safety (8).
			{ maxDepth: 2, depthSize: "small", withCrossShrink: true },
			{ weight: 4, arbitrary: leaf },
			{ weight: 1, arbitrary: fc.array(tie("node"), { minLength: 1, maxLength: 3 }).map((or) => ({ or })) },
			{ weight: 1, arbitrary: fc.array(tie("node"), { minLength: 1, maxLength: 3 }).map((and) => ({ and })) },
			{ weight: 1, arbitrary: tie("node").map((not) => ({ not })) },
		),
	}));
	return node;
}

interface GenDoc {
	owner: string;
	shares: string[];
	groups: string[];
	clients: string[];
	name?: string;
	lat?: number;
	address?: string;
	tags?: string[];
	deleted: boolean;
}

const docArb: fc.Arbitrary<GenDoc> = fc.record(
	{
		owner: fc.constantFrom(...IDENTITIES),
		shares: fc.subarray(IDENTITIES, { maxLength: 3 }),
		groups: fc.subarray(GROUPS),
		// Any order: the first entry is the document's tenant (the group zone acts only there).
		clients: fc.shuffledSubarray(CLIENTS),
		name: fc.constantFrom(...NAMES),
		lat: fc.integer({ min: -3, max: 3 }),
		address: fc.constantFrom(...ADDRESSES),
		tags: fc.subarray(TAGS),
		deleted: fc.boolean(),
	},
	{ requiredKeys: ["owner", "shares", "groups", "clients", "deleted"] },
);

interface GenToken {
	uid?: string;
	cid: string;
	groups: string[];
	department?: string;
	role: boolean;
}

const tokenArb: fc.Arbitrary<GenToken> = fc.record(
	{ uid: fc.constantFrom(...USERS), cid: fc.constantFrom(...CLIENTS), groups: fc.subarray(GROUPS), department: fc.constantFrom(...DEPTS), role: fc.boolean() },
	{ requiredKeys: ["cid", "groups", "role"] },
);

interface GenGrant {
	subject: "identity" | "role" | "group" | "stranger";
	action: "read" | "write" | "manage" | "send";
	object: "exact" | "wildcard" | "other";
	field: string[] | null;
	filter: Node[] | null;
	location: "none" | "inside" | "outside";
}

const ALLOWABLE_FIELDS = ["name", "lat", "address", "tags", "owner", "groups", "shares", "clients"];

/** Weighted choice among constants. */
const weighted = <T>(...pairs: Array<[number, T]>): fc.Arbitrary<T> => fc.oneof(...pairs.map(([weight, v]) => ({ weight, arbitrary: fc.constant(v) })));

const grantArb: fc.Arbitrary<GenGrant> = fc.record({
	subject: weighted<GenGrant["subject"]>([4, "identity"], [2, "role"], [2, "group"], [1, "stranger"]),
	action: weighted<GenGrant["action"]>([3, "read"], [2, "write"], [3, "manage"], [1, "send"]),
	object: weighted<GenGrant["object"]>([5, "exact"], [2, "wildcard"], [1, "other"]),
	field: fc.option(fc.subarray(ALLOWABLE_FIELDS, { minLength: 1 }), { nil: null, freq: 1 }),
	filter: fc.option(fc.array(nodeArb(true, false), { minLength: 1, maxLength: 2 }), { nil: null, freq: 2 }),
	location: weighted<GenGrant["location"]>([5, "none"], [2, "inside"], [1, "outside"]),
});

const caseArb = fc.record({
	docs: fc.array(docArb, { minLength: 3, maxLength: DOC_IDS.length }),
	token: tokenArb,
	grants: fc.array(grantArb, { minLength: 1, maxLength: 3 }),
	query: fc.option(nodeArb(false, true), { nil: null, freq: 3 }),
	zones: fc.option(fc.subarray([...ZONES], { minLength: 1 }), { nil: null, freq: 3 }),
	zoneCarrier: fc.constantFrom("query" as const, "header" as const),
	withDeleted: fc.boolean(),
	op: weighted<"list" | "count" | "bulkPatch" | "get">([4, "list"], [1, "count"], [1, "bulkPatch"], [1, "get"]),
	target: fc.constantFrom(...DOC_IDS.slice(0, 6)),
});

// ---------------------------------------------------------------------------------------------------------------
// The property
// ---------------------------------------------------------------------------------------------------------------

function claimsOf(t: GenToken): TokenClaims {
	const identity = t.uid ?? t.cid;
	const subjects = [`${identity}@${DOMAIN}`, ...(t.role ? [`@editor@${DOMAIN}`] : []), ...t.groups.map((g) => `${g}@${DOMAIN}`)];
	return {
		type: "access",
		strict: false,
		cid: t.cid,
		client_id: t.cid,
		...(t.uid ? { uid: t.uid } : {}),
		scope: "whole",
		domain: DOMAIN,
		subject: subjects.join(" "),
		tz: "UTC",
		session: "s",
		...(t.uid ? { groups: t.groups } : {}),
		...(t.department ? { department: t.department } : {}),
	};
}

function toGrant(g: GenGrant, t: GenToken): Grant {
	const subject = {
		identity: `${t.uid ?? t.cid}@${DOMAIN}`,
		role: `@editor@${DOMAIN}`,
		group: `${GROUPS[0]}@${DOMAIN}`,
		stranger: `${hex("e", 9)}@${DOMAIN}`,
	}[g.subject];
	const object = { exact: OBJECT, wildcard: "logistic:*", other: "logistic:travels" }[g.object];
	return {
		subject,
		action: g.action,
		object,
		...(g.field ? { field: g.field } : {}),
		...(g.filter ? { filter: g.filter.map((n) => JSON.stringify(render(n))) } : {}),
		...(g.location === "inside" ? { location: ["127.0.0.0/8"] } : g.location === "outside" ? { location: ["10.0.0.0/8"] } : {}),
	};
}

const LEVEL = { list: "read", count: "read", get: "read", bulkPatch: "manage" } as const;
const RANK: Record<string, number> = { read: 1, write: 2, manage: 3 };

type Case = typeof caseArb extends fc.Arbitrary<infer T> ? T : never;

/** The stored form of the generated documents (ids DOC_IDS[i]). */
function storedDocs(c: Case): StoredDoc[] {
	return c.docs.map((d, i) => {
		const { deleted, ...rest } = d;
		return { id: DOC_IDS[i], ...rest, deleted_at: deleted ? "2024-01-01T00:00:00.000Z" : null };
	});
}

/** The independent expectation of one case. */
function oracle(c: Case) {
	const token = claimsOf(c.token);
	const grants = c.grants.map((g) => toGrant(g, c.token));
	const tokenSubjects = token.subject.split(" ");
	const level = LEVEL[c.op];
	const matching = (object: GenGrant["object"]) =>
		c.grants.filter(
			(g, i) => tokenSubjects.includes(grants[i].subject) && (g.action === level || (RANK[g.action] ?? 0) >= RANK[level]) && g.object === object && g.location !== "outside",
		);
	// The spec's order: exact-object grants; `service:*` grants only when no exact grant applies.
	const exact = matching("exact");
	const applicable = exact.length ? exact : matching("wildcard");
	const claims = token as unknown as Claims;
	const memberships = c.token.uid ? c.token.groups : [];
	const query = c.query ? reduceGroups(c.query, memberships) : null;
	const allowed = applicable.some((g) => g.field === null) ? null : new Set(applicable.flatMap((g) => g.field ?? []));
	const referenced = c.query ? [...fieldsOf(c.query)].filter((f) => f !== "id") : [];
	const zones: ZoneName[] = c.zones ?? ["own", "share"];
	const identity = c.token.uid ?? c.token.cid;
	const inZone = (d: GenDoc) =>
		zones.some((z) =>
			z === "own"
				? d.owner === identity
				: z === "share"
					? d.shares.includes(identity)
					: z === "group"
						? d.clients[0] === c.token.cid && d.groups.some((g) => memberships.includes(g))
						: d.clients.includes(c.token.cid),
		);
	const asDoc = (i: number): Record<string, unknown> => ({ ...c.docs[i], id: DOC_IDS[i] });
	const rowOkDoc = (doc: Record<string, unknown>) =>
		applicable.some((g) => g.filter === null) || applicable.some((g) => (g.filter ?? []).some((n) => !missingVar(n, claims) && evaluate(n, doc, claims)));
	const rowOk = (i: number) => rowOkDoc(asDoc(i));
	const expected = c.docs
		.map((d, i) => ({ d, i }))
		.filter(({ d, i }) => (c.op !== "get" || DOC_IDS[i] === c.target) && (c.withDeleted || !d.deleted) && inZone(d) && rowOk(i) && (!query || evaluate(query, asDoc(i), claims)))
		.map(({ i }) => DOC_IDS[i])
		.sort();
	// A bulk patch body ({ name }) must be writable too.
	const written = c.op === "bulkPatch" ? ["name"] : [];
	const refused = applicable.length === 0 || (allowed !== null && [...referenced, ...written].some((f) => !allowed.has(f)));
	// A write may not move a document out of the grant's rows: a bulk patch that would is refused whole (403, nothing
	// written). Only the write path (the broker's) checks it; the plan alone does not.
	const writeRefused = c.op === "bulkPatch" && expected.some((id) => !rowOkDoc({ ...asDoc(DOC_IDS.indexOf(id)), name: "patched" }));
	/** Never a document outside soft delete ∧ zones ∧ row filter. */
	const assertInside = (ids: string[]) => {
		for (const id of ids) {
			const i = DOC_IDS.indexOf(id);
			expect(inZone(c.docs[i])).toBe(true);
			expect(rowOk(i)).toBe(true);
			if (!c.withDeleted) expect(c.docs[i].deleted).toBe(false);
		}
	};
	return { token, grants, level, allowed, referenced, applicable, expected, refused, writeRefused, assertInside };
}

/** The collection action's params and ctx.meta headers, as the gateway builds them from a request. */
function request(c: Case): { params: Record<string, unknown>; headers: Record<string, string> } {
	const headers: Record<string, string> = {};
	if (c.withDeleted) headers["x-exclude-soft-delete-query"] = "";
	const q: Record<string, unknown> = {};
	if (c.query) q.query = JSON.stringify(render(c.query));
	if (c.zones) {
		if (c.zoneCarrier === "query") q.zone = c.zones.join(",");
		else headers["x-zone"] = c.zones.join(",");
	}
	if (c.op === "list") q.pagination = JSON.stringify({ limit: 100 });
	const params = { query: q, ...(c.op === "get" ? { params: { id: c.target } } : {}), ...(c.op === "bulkPatch" ? { body: { name: "patched" } } : {}) };
	return { params, headers };
}

const seed = process.env.FC_SEED ? Number(process.env.FC_SEED) : undefined;

describe("enforce() + the query language in memory (no platform, no server)", () => {
	test("return exactly soft delete ∧ zones ∧ row filter ∧ query (1000 runs)", async () => {
		let executed = 0;
		let nonEmpty = 0;
		await fc.assert(
			fc.asyncProperty(caseArb, async (c) => {
				const o = oracle(c);
				// Only grants the platform would have accepted.
				for (const g of o.grants) validateGrant(g, [DOMAIN]);
				const docs = storedDocs(c);

				const { params, headers } = request(c);
				const ctx = { params, meta: { token: o.token, headers, ip: "127.0.0.1" }, locals: {} } as any;
				const meta: CollectionActionMeta = { service: "logistic", collection: "locations", op: c.op, level: o.level };
				const index = new GrantIndex(o.grants);
				let got: string[];
				try {
					const decision = checkGrant(index, o.token, o.level, OBJECT, ctx.meta.ip);
					const plan = enforce(ctx, index, col, meta, decision, o.token);
					const q = plan.filter;
					got = docs
						.filter((d) => matches(d, q))
						.map((d) => d.id)
						.sort();
				} catch (err) {
					if ((err as { code?: number }).code === 403 && o.refused) return;
					throw err;
				}
				executed++;
				if (got.length) nonEmpty++;
				if (o.refused) throw new Error(`expected 403 (applicable grants ${o.applicable.length}, referenced ${o.referenced}), got ${got.length} documents`);
				o.assertInside(got);
				expect(got).toEqual(o.expected);
			}),
			{ numRuns: 1000, seed },
		);
		// The generators must actually reach the interesting cases: ≥ 200 executed runs, many with documents returned.
		expect(executed).toBeGreaterThanOrEqual(200);
		expect(nonEmpty).toBeGreaterThanOrEqual(100);
		if (process.env.FC_STATS) console.log({ executed, nonEmpty, refused: 1000 - executed });
	}, 120_000);
});

describe("the broker path: authority middleware, collection engine and the platform's store", () => {
	let p: TestPlatform;
	let locations: DocumentStore;
	let grantsStore: DocumentStore;
	beforeAll(async () => {
		p = await bootPlatform();
		locations = (p.broker.getLocalService("logistic") as any).collectionStore("locations");
		grantsStore = (p.broker.getLocalService("auth") as any).collectionStore("grants");
	}, 60_000);
	afterAll(() => p?.cleanup());
	withStatusProbe(() => p.url);

	test("list, count, get and bulk patch through broker.call with a token in meta (250 runs)", async () => {
		let executed = 0;
		let nonEmpty = 0;
		let seeded: string[] = [];
		await fc.assert(
			fc.asyncProperty(caseArb, async (c) => {
				const o = oracle(c);
				// The grants of this case replace the previous case's; the node's grant index reloads.
				if (seeded.length) await grantsStore.removeMany({ id: { $in: seeded } });
				const grantDocs = o.grants.map((g) => platformDoc({ ...g }, { owner: hex("0", 0), cid: CLIENTS[0] }));
				seeded = grantDocs.map((d) => d.id);
				await grantsStore.insertMany(grantDocs);
				grantCache.invalidate();
				await locations.removeMany({});
				await locations.insertMany(storedDocs(c));

				const { params, headers } = request(c);
				const action = `logistic.locations.${c.op}`;
				let res: any;
				try {
					res = await p.broker.call(action, params, { meta: { token: o.token, headers, ip: "127.0.0.1" } });
				} catch (err) {
					const code = (err as { code?: number }).code;
					if (code === 403 && o.refused) return;
					if (code === 404 && c.op === "get" && !o.refused && o.expected.length === 0) return;
					if (code === 403 && o.writeRefused && (err as Error).message === "document is outside the grant filter") {
						// All or nothing: no document was patched.
						expect(await locations.count({ name: "patched" })).toBe(0);
						return;
					}
					throw err;
				}
				if (o.writeRefused) throw new Error(`expected 403 (the patch moves a document out of the grant rows), got ${JSON.stringify(res).slice(0, 200)}`);
				executed++;
				if (o.expected.length) nonEmpty++;
				if (o.refused) throw new Error(`expected 403, got ${JSON.stringify(res).slice(0, 200)}`);
				const allowedKeys = o.allowed ? new Set(["id", ...o.allowed]) : null;
				if (c.op === "list") {
					const ids = (res.items as Array<{ id: string }>).map((d) => d.id).sort();
					o.assertInside(ids);
					expect(ids).toEqual(o.expected);
					expect(res.total).toBe(o.expected.length);
					// Responses carry only the allowed fields.
					if (allowedKeys) for (const d of res.items) for (const k of Object.keys(d)) expect(allowedKeys.has(k)).toBe(true);
				} else if (c.op === "count") expect(res).toEqual({ total: o.expected.length });
				else if (c.op === "get") {
					expect(o.expected).toEqual([c.target]);
					expect(res.data.id).toBe(c.target);
				} else {
					// Bulk patch: exactly the documents in view changed, {total} counts only them.
					expect(res).toEqual({ total: o.expected.length });
					const changed = ((await locations.find({ query: { name: "patched" } })) as StoredDoc[]).map((d) => d.id).sort();
					expect(changed).toEqual(o.expected);
				}
			}),
			{ numRuns: 250, seed },
		);
		expect(executed).toBeGreaterThanOrEqual(100);
		expect(nonEmpty).toBeGreaterThanOrEqual(40);
		if (process.env.FC_STATS) console.log({ executed, nonEmpty });
	}, 120_000);
});
