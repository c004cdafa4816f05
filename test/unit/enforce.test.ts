/**
 * The authority layer's decisions without a platform (lib/authority.ts): scope, grant, then the access plan that query
 * enforcement builds, for two tenants (A and B), a tenant admin of each, a member of A whose grant has a row filter, a
 * field-limited user and a user with location and time grants. Every plan is asserted whole: which conditions the
 * filter holds, which fields the response may carry, which refusal answers with which status and message (the
 * messages clients see through the gateway, test/integration/authorization-matrix.test.ts).
 */
import { findCollection, PLATFORM_FIELDS, SETTABLE_FIELDS, STANDARD_OPS, type StandardOp } from "../../catalog";
import { and, checkGrant, checkScope, enforce, subjectsOf, type EnforceRequest } from "../../lib/authority";
import { ApiError } from "../../lib/errors";
import { GrantIndex, matchNothing, type Grant } from "../../lib/grants";
import type { AccessPlan } from "../../lib/plan";
import type { TokenClaims } from "../../lib/types";

const A = { cid: "a0a0a0a0a0a0a0a0a0a0a0a0", domain: "a.example" };
const B = { cid: "b0b0b0b0b0b0b0b0b0b0b0b0", domain: "b.example" };
const ADMIN_A = "a1a1a1a1a1a1a1a1a1a1a1a1";
const MEMBER_A = "a2a2a2a2a2a2a2a2a2a2a2a2";
const LIMITED_A = "a3a3a3a3a3a3a3a3a3a3a3a3";
const PLACED_A = "a4a4a4a4a4a4a4a4a4a4a4a4";
const ADMIN_B = "b1b1b1b1b1b1b1b1b1b1b1b1";
const TEAM = "team@a.example";
const DOC = "0123456789abcdef01234567";

/** An access token of tenant `t` for user `uid`: its subjects are the user and its roles, in the tenant's domain. */
function tokenOf(t: typeof A, uid: string, roles: string[] = [], extra: Partial<TokenClaims> = {}): TokenClaims {
	return {
		type: "access",
		strict: false,
		cid: t.cid,
		client_id: t.cid,
		uid,
		scope: "whole",
		domain: t.domain,
		subject: [uid, ...roles].map((s) => `${s}@${t.domain}`).join(" "),
		session: "s1",
		...extra,
	};
}

const adminA = tokenOf(A, ADMIN_A, ["@admin"]);
const adminB = tokenOf(B, ADMIN_B, ["@admin"]);
const memberA = tokenOf(A, MEMBER_A, ["@member"], { groups: [TEAM] });
const limitedA = tokenOf(A, LIMITED_A);
const placedA = tokenOf(A, PLACED_A);

const closedMinute = (new Date().getUTCMinutes() + 30) % 60;
const GRANTS: Grant[] = [
	// Each tenant admin manages its tenant's content and logistic; A's admin also identity.
	{ subject: `@admin@${A.domain}`, action: "manage", object: "content:*" },
	{ subject: `@admin@${A.domain}`, action: "manage", object: "logistic:*" },
	{ subject: `@admin@${A.domain}`, action: "manage", object: "identity:*" },
	{ subject: `@admin@${B.domain}`, action: "manage", object: "content:*" },
	// A member writes the notes whose content is its own id, reads the posts titled "pub…" or tagged "open".
	{ subject: `@member@${A.domain}`, action: "write", object: "content:notes", filter: [JSON.stringify({ content: "{{token.uid}}" })] },
	{ subject: `@member@${A.domain}`, action: "read", object: "content:posts", filter: [JSON.stringify({ status: "PUBLISHED" }), JSON.stringify({ tags: "open" })] },
	// A filter on a claim the token lacks: granted, nothing matches.
	{ subject: `@member@${A.domain}`, action: "read", object: "content:tickets", filter: [JSON.stringify({ content: "{{token.department}}" })] },
	// The field-limited user sees and writes only notes' titles, reads travels' status, and reads vehicles.
	{ subject: `${LIMITED_A}@${A.domain}`, action: "manage", object: "content:notes", field: ["title"] },
	{ subject: `${LIMITED_A}@${A.domain}`, action: "read", object: "logistic:travels", field: ["status"] },
	{ subject: `${LIMITED_A}@${A.domain}`, action: "read", object: "logistic:vehicles" },
	// Located and timed grants.
	{ subject: `${PLACED_A}@${A.domain}`, action: "read", object: "content:notes", location: ["10.0.0.0/8"] },
	{ subject: `${PLACED_A}@${A.domain}`, action: "read", object: "content:posts", time: [{ cron_exp: `${closedMinute} * * * *`, duration: 60 }] },
	{ subject: `${PLACED_A}@${A.domain}`, action: "manage", object: "logistic:travels" },
];
const index = new GrantIndex(GRANTS);

/** The plan the layers give `token` for `op` on `object` (`service:collection`), as the middleware asks for it. */
function plan(token: TokenClaims, op: StandardOp, object: string, req: EnforceRequest = {}): AccessPlan {
	const [service, collection] = object.split(":");
	const col = findCollection(service, collection)!.collection;
	const level = STANDARD_OPS[op];
	checkScope(token, level, service, collection);
	const decision = checkGrant(index, token, level, object, req.ip);
	return enforce(req, index, col, op, decision, token);
}

/** The refusal `fn` throws: the platform's ApiError, as status and message. */
function refusal(fn: () => unknown): { status: number; message: string } {
	try {
		fn();
	} catch (err) {
		expect(err).toBeInstanceOf(ApiError);
		return { status: (err as ApiError).code, message: (err as ApiError).message };
	}
	throw new Error("expected a refusal");
}

const forbidden = (message: string) => ({ status: 403, message });
const badRequest = (message: string) => ({ status: 400, message });
const ownOrShared = (id: string) => ({ $or: [{ owner: id }, { shares: id }] });
const NOTES_LIST = (token: TokenClaims, req: EnforceRequest = {}) => plan(token, "list", "content:notes", req);
const COMMON_OUTPUT = [...Object.keys(PLATFORM_FIELDS), ...Object.keys(SETTABLE_FIELDS)].filter((f) => f !== "id");

describe("layer 1: the token's scope", () => {
	test("a scope that covers the collection passes; one that does not answers 403 naming the scope required", () => {
		const reader = { ...adminA, scope: "read:content:notes" };
		expect(() => checkScope(reader, "read", "content", "notes")).not.toThrow();
		expect(() => checkScope({ ...adminA, scope: "read:content" }, "read", "content", "posts")).not.toThrow();
		expect(() => checkScope({ ...adminA, scope: "manage:content:notes" }, "write", "content", "notes")).not.toThrow();
		expect(refusal(() => plan(reader, "create", "content:notes", { body: { title: "x" } }))).toEqual(forbidden("token scope does not cover write:content:notes"));
		expect(refusal(() => plan(reader, "list", "content:posts"))).toEqual(forbidden("token scope does not cover read:content:posts"));
		expect(refusal(() => checkScope({ ...adminA, scope: "" }, "read", "content", "notes"))).toEqual(forbidden("token scope does not cover read:content:notes"));
		// A malformed held scope (no service) covers nothing.
		expect(refusal(() => checkScope({ ...adminA, scope: "read" }, "read", "content", "notes"))).toEqual(forbidden("token scope does not cover read:content:notes"));
	});

	test("the scope is checked before the grant: a caller without either hears about the scope", () => {
		expect(refusal(() => plan({ ...adminB, scope: "read:content" }, "list", "logistic:vehicles"))).toEqual(forbidden("token scope does not cover read:logistic:vehicles"));
	});
});

describe("layer 2: the grant", () => {
	test("subjects are the token's space-separated subject claim", () => {
		expect(subjectsOf(adminA)).toEqual([`${ADMIN_A}@a.example`, "@admin@a.example"]);
		expect(subjectsOf({ ...adminA, subject: "" })).toEqual([]);
		expect(subjectsOf({ ...adminA, subject: " x@a.example  y@a.example " })).toEqual(["x@a.example", "y@a.example"]);
	});

	test("a tenant admin's grants are its tenant's: the other tenant's admin holds none of them", () => {
		expect(checkGrant(index, adminA, "read", "logistic:vehicles").granted).toBe(true);
		expect(refusal(() => plan(adminB, "list", "logistic:vehicles"))).toEqual(forbidden("no grant for read on logistic:vehicles"));
		expect(refusal(() => plan(adminB, "get", "identity:users", { id: ADMIN_A }))).toEqual(forbidden("no grant for read on identity:users"));
		// The same role name in another domain is another subject.
		expect(refusal(() => plan({ ...adminB, subject: `${ADMIN_B}@b.example @admin@b.example @member@b.example` }, "list", "logistic:travels"))).toEqual(
			forbidden("no grant for read on logistic:travels"),
		);
	});

	test("the grant's action must cover the operation's level: write ⊉ manage, read ⊉ write", () => {
		expect(refusal(() => plan(memberA, "destroy", "content:notes", { id: DOC }))).toEqual(forbidden("no grant for manage on content:notes"));
		expect(refusal(() => plan(memberA, "bulkPatch", "content:notes", { body: { title: "x" } }))).toEqual(forbidden("no grant for manage on content:notes"));
		expect(refusal(() => plan(memberA, "create", "content:posts", { body: { title: "x" } }))).toEqual(forbidden("no grant for write on content:posts"));
		expect(refusal(() => plan(limitedA, "patch", "logistic:travels", { id: DOC, body: { status: "DONE" } }))).toEqual(forbidden("no grant for write on logistic:travels"));
	});

	test("a location grant applies from inside its ranges only; no address is outside", () => {
		expect(plan(placedA, "list", "content:notes", { ip: "10.1.2.3" }).filter).toEqual({ deleted_at: null, ...ownOrShared(PLACED_A) });
		expect(refusal(() => plan(placedA, "list", "content:notes", { ip: "127.0.0.1" }))).toEqual(forbidden("request ip is outside the grant location"));
		expect(refusal(() => plan(placedA, "count", "content:notes"))).toEqual(forbidden("request ip is outside the grant location"));
	});

	test("a time grant outside its window: 403 naming the window", () => {
		expect(refusal(() => plan(placedA, "list", "content:posts"))).toEqual(forbidden("request is outside the grant time window"));
	});
});

describe("layer 3: the plan's filter", () => {
	test("a list: not deleted, in the default zones own and share; defaults for paging, no row condition for the admin", () => {
		expect(NOTES_LIST(adminA)).toEqual({ filter: { deleted_at: null, ...ownOrShared(ADMIN_A) }, fields: null, sort: undefined, skip: 0, limit: 10, populate: [], token: adminA });
		expect(plan(adminB, "count", "content:notes").filter).toEqual({ deleted_at: null, ...ownOrShared(ADMIN_B) });
	});

	test("zones: ?zone= over the x-zone header; client and group stay inside the caller's tenant", () => {
		expect(NOTES_LIST(memberA, { query: { zone: "client" } }).filter).toMatchObject({ clients: A.cid });
		expect(NOTES_LIST(adminB, { query: { zone: "client" } }).filter).toEqual({ deleted_at: null, clients: B.cid });
		expect(NOTES_LIST(memberA, { headers: { "x-zone": "group" } }).filter).toEqual({ deleted_at: null, groups: { $in: [TEAM] }, "clients.0": A.cid, content: MEMBER_A });
		// A token without groups is in no group: the group zone matches nothing.
		expect(NOTES_LIST(adminA, { headers: { "x-zone": "group" } }).filter).toEqual({ deleted_at: null, groups: { $in: [] }, "clients.0": A.cid });
		expect(NOTES_LIST(adminA, { query: { zone: "own" }, headers: { "x-zone": "client" } }).filter).toEqual({ deleted_at: null, owner: ADMIN_A });
		expect(NOTES_LIST(adminA, { query: { zone: "own,client,own" } }).filter).toEqual({ deleted_at: null, $or: [{ owner: ADMIN_A }, { clients: A.cid }] });
		expect(NOTES_LIST(adminA, { query: { zone: ["share", "own"] } }).filter).toEqual({ deleted_at: null, $or: [{ shares: ADMIN_A }, { owner: ADMIN_A }] });
		for (const zone of ["public", "everyone", "own,world"])
			expect(refusal(() => NOTES_LIST(adminA, { query: { zone } }))).toEqual(badRequest(`unknown zone ${zone.replace("own,", "")}`));
		expect(refusal(() => NOTES_LIST(adminA, { headers: { "x-zone": "header" } }))).toEqual(badRequest("unknown zone header"));
	});

	test("soft delete: the x-exclude-soft-delete-query header lifts the condition, restore and destroy never carry it", () => {
		expect(NOTES_LIST(adminA, { headers: { "x-exclude-soft-delete-query": "" } }).filter).toEqual(ownOrShared(ADMIN_A));
		expect(plan(adminA, "restore", "content:notes", { id: DOC }).filter).toEqual({ ...ownOrShared(ADMIN_A), id: DOC });
		expect(plan(adminA, "destroy", "content:notes", { id: DOC }).filter).toEqual({ ...ownOrShared(ADMIN_A), id: DOC });
		expect(plan(adminA, "remove", "content:notes", { id: DOC }).filter).toEqual({ deleted_at: null, ...ownOrShared(ADMIN_A), id: DOC });
	});

	test("a row filter with a token variable: the member's own id, ANDed with zones; the user's query narrows inside it, never replaces it", () => {
		const p = NOTES_LIST(memberA);
		expect(p.filter).toEqual({ deleted_at: null, ...ownOrShared(MEMBER_A), content: MEMBER_A });
		expect(p.fields).toBeNull();
		// The caller's condition on the same key goes into $and beside the grant's.
		const q = NOTES_LIST(memberA, { query: { query: JSON.stringify({ content: "someone-else" }) } });
		expect(q.filter).toEqual({ deleted_at: null, ...ownOrShared(MEMBER_A), content: MEMBER_A, $and: [{ content: "someone-else" }] });
		// A user $or next to the zones' $or: both hold.
		const o = NOTES_LIST(memberA, { query: { query: { $or: [{ title: "a" }, { title: "b" }] } } });
		expect(o.filter).toEqual({ deleted_at: null, ...ownOrShared(MEMBER_A), content: MEMBER_A, $and: [{ $or: [{ title: "a" }, { title: "b" }] }] });
	});

	test("several filter entries combine by OR; beside the zones' $or they keep their meaning inside $and", () => {
		expect(plan(memberA, "list", "content:posts").filter).toEqual({
			deleted_at: null,
			...ownOrShared(MEMBER_A),
			$and: [{ $or: [{ status: "PUBLISHED" }, { tags: "open" }] }],
		});
		expect(plan(memberA, "list", "content:posts", { query: { zone: "own" } }).filter).toEqual({
			deleted_at: null,
			owner: MEMBER_A,
			$or: [{ status: "PUBLISHED" }, { tags: "open" }],
		});
	});

	test("a row filter on a claim the token lacks: granted, and the plan matches nothing", () => {
		expect(plan(memberA, "list", "content:tickets", { query: { zone: "own" } }).filter).toEqual({ deleted_at: null, owner: MEMBER_A, ...matchNothing() });
	});

	test("writes: the plan carries the grant's row filter as the write filter; none without a row filter, none on reads", () => {
		expect(plan(memberA, "create", "content:notes", { body: { title: "t", content: MEMBER_A } })).toEqual({
			filter: { deleted_at: null, ...ownOrShared(MEMBER_A), content: MEMBER_A },
			fields: null,
			sort: undefined,
			skip: 0,
			limit: 10,
			populate: [],
			token: memberA,
			writeFilter: { content: MEMBER_A },
		});
		expect(plan(memberA, "patch", "content:notes", { id: DOC, body: { title: "t" } }).writeFilter).toEqual({ content: MEMBER_A });
		expect(plan(memberA, "remove", "content:notes", { id: DOC }).writeFilter).toBeUndefined();
		expect(plan(memberA, "list", "content:notes").writeFilter).toBeUndefined();
		expect(plan(adminA, "create", "content:notes", { body: { title: "t" } }).writeFilter).toBeUndefined();
	});

	test("a write's own body is no query: create and patch plans hold no condition of the caller's", () => {
		const p = plan(adminA, "create", "content:notes", { query: { query: JSON.stringify({ content: "x" }) }, body: { title: "t" } });
		expect(p.filter).toEqual({ deleted_at: null, ...ownOrShared(ADMIN_A) });
	});

	test("bulk patch reads the caller's query like a list (no paging)", () => {
		const p = plan(adminA, "bulkPatch", "content:notes", { query: { query: { title: "a" }, pagination: { limit: 1 } }, body: { content: "c" } });
		expect(p).toMatchObject({ filter: { deleted_at: null, ...ownOrShared(ADMIN_A), title: "a" }, skip: 0, limit: 10 });
	});
});

describe("layer 3: by id and by ref", () => {
	test("the id condition is lower-cased and comes last, also after $and; a query on id beside it holds too", () => {
		expect(plan(adminA, "get", "content:notes", { id: DOC.toUpperCase() }).filter).toEqual({ deleted_at: null, ...ownOrShared(ADMIN_A), id: DOC });
		const other = "ffffffffffffffffffffffff";
		const p = plan(adminA, "get", "content:notes", { id: DOC, query: { query: { id: other } } });
		expect(p.filter).toEqual({ deleted_at: null, ...ownOrShared(ADMIN_A), $and: [{ id: DOC }], id: other });
		expect(Object.keys(p.filter)).toEqual(["deleted_at", "$or", "$and", "id"]);
		const q = plan(memberA, "patch", "content:notes", { id: DOC, body: { title: "t" } });
		expect(Object.keys(q.filter)).toEqual(["deleted_at", "$or", "content", "id"]);
	});

	test("a malformed or missing id is 404 before anything is read", () => {
		for (const id of ["not-an-id", "0123456789abcdef0123456", "0123456789abcdef012345678", "", undefined, 42])
			expect(refusal(() => plan(adminA, "get", "content:notes", { id }))).toEqual({ status: 404, message: "document not found" });
		expect(refusal(() => plan(adminA, "patch", "content:notes", { id: "../x", body: {} }))).toEqual({ status: 404, message: "document not found" });
	});

	test("?ref=true on get: a condition on ref, which the field list must allow", () => {
		expect(plan(adminA, "get", "content:notes", { id: "my-ref", query: { ref: "true" } }).filter).toEqual({ deleted_at: null, ...ownOrShared(ADMIN_A), ref: "my-ref" });
		expect(plan(adminA, "get", "content:notes", { id: "my-ref", query: { ref: true } }).filter.ref).toBe("my-ref");
		expect(refusal(() => plan(limitedA, "get", "content:notes", { id: "my-ref", query: { ref: "true" } }))).toEqual(forbidden("query field ref is not allowed"));
		// ref only on get: elsewhere the id must be an object id.
		expect(refusal(() => plan(adminA, "remove", "content:notes", { id: "my-ref", query: { ref: "true" } }))).toEqual({ status: 404, message: "document not found" });
	});
});

describe("layer 3: hidden fields (the field-limited user sees notes' titles only)", () => {
	test("its plan lists the allowed fields; the filter is the zones'", () => {
		expect(NOTES_LIST(limitedA)).toMatchObject({ filter: { deleted_at: null, ...ownOrShared(LIMITED_A) }, fields: ["title"] });
		expect(NOTES_LIST(limitedA, { query: { query: { title: "s1", "title.x": 1, id: DOC } } }).filter).toMatchObject({ title: "s1", "title.x": 1, id: DOC });
	});

	test.each([
		["a hidden field", { content: "secret-1" }, "content"],
		["a hidden field inside $or", { $or: [{ title: "s1" }, { content: "secret-1" }] }, "content"],
		["a hidden field inside $and", { $and: [{ title: "s1" }, { content: { $regex: "^secret" } }] }, "content"],
		["a hidden nested path", { "props.k": 1 }, "props.k"],
		["a hidden field with $exists", { content: { $exists: true } }, "content"],
		["a hidden field inside $not", { $not: { owner: "x" } }, "owner"],
		["a hidden field with $elemMatch", { tags: { $elemMatch: { $eq: "x" } } }, "tags"],
		["a hidden sub-document path", { props: { k: 1 } }, "props"],
		["a hidden field with $in", { shares: { $in: ["x"] } }, "shares"],
	])("a query naming %s → 403 (list, count, cursor, get, bulk patch)", (_what, query, field) => {
		const message = `query field ${field} is not allowed`;
		for (const op of ["list", "count", "cursor"] as const) expect(refusal(() => plan(limitedA, op, "content:notes", { query: { query } }))).toEqual(forbidden(message));
		expect(refusal(() => plan(limitedA, "get", "content:notes", { id: DOC, query: { query: JSON.stringify(query) } }))).toEqual(forbidden(message));
		expect(refusal(() => plan(limitedA, "bulkPatch", "content:notes", { query: { query }, body: { title: "t" } }))).toEqual(forbidden(message));
	});

	test("a sort or a projection naming a hidden field → 403, inclusion and exclusion alike", () => {
		expect(refusal(() => NOTES_LIST(limitedA, { query: { pagination: { sort: { content: 1 } } } }))).toEqual(forbidden("sort field content is not allowed"));
		expect(refusal(() => NOTES_LIST(limitedA, { query: { pagination: JSON.stringify({ sort: { owner: -1 } }) } }))).toEqual(forbidden("sort field owner is not allowed"));
		expect(refusal(() => NOTES_LIST(limitedA, { query: { projection: { content: 1 } } }))).toEqual(forbidden("projection field content is not allowed"));
		expect(refusal(() => NOTES_LIST(limitedA, { query: { projection: { content: 0 } } }))).toEqual(forbidden("projection field content is not allowed"));
		expect(refusal(() => plan(limitedA, "get", "content:notes", { id: DOC, query: { projection: { created_at: 1 } } }))).toEqual(
			forbidden("projection field created_at is not allowed"),
		);
	});

	test("a write body setting a hidden field → 403 (create, bulk create, patch, bulk patch)", () => {
		expect(refusal(() => plan(limitedA, "create", "content:notes", { body: { title: "t", content: "c" } }))).toEqual(forbidden("field content is not allowed"));
		expect(refusal(() => plan(limitedA, "create", "content:notes", { body: { title: "t", shares: [] } }))).toEqual(forbidden("field shares is not allowed"));
		expect(refusal(() => plan(limitedA, "bulkCreate", "content:notes", { body: { items: [{ title: "t" }, { title: "u", description: "d" }] } }))).toEqual(
			forbidden("field description is not allowed"),
		);
		expect(refusal(() => plan(limitedA, "patch", "content:notes", { id: DOC, body: { content: "c" } }))).toEqual(forbidden("field content is not allowed"));
		expect(refusal(() => plan(limitedA, "bulkPatch", "content:notes", { body: { content: "c" } }))).toEqual(forbidden("field content is not allowed"));
		// The allowed field, and `id`, pass.
		expect(plan(limitedA, "create", "content:notes", { body: { title: "t", id: DOC } }).fields).toEqual(["title"]);
		expect(plan(limitedA, "bulkCreate", "content:notes", { body: { items: [{ title: "t" }, null, "x"] } }).fields).toEqual(["title"]);
	});

	test("response fields: the allowlist, narrowed by an inclusion projection, never widened", () => {
		expect(NOTES_LIST(limitedA, { query: { projection: { title: 1 } } }).fields).toEqual(["title"]);
		expect(NOTES_LIST(adminA, { query: { projection: { title: 1, "props.k": 1 } } }).fields).toEqual(["title", "props.k"]);
		// Exclusion: every field the document can return but the excluded ones.
		const excl = NOTES_LIST(adminA, { query: { projection: { content: 0, owner: 0 } } }).fields!;
		expect(excl).toEqual(["title", ...COMMON_OUTPUT.filter((f) => f !== "owner")]);
		expect(excl).not.toContain("id");
		expect(excl).toContain("created_at");
	});

	test("paging: limit, skip and sort come from pagination; the defaults otherwise", () => {
		expect(NOTES_LIST(limitedA, { query: { pagination: { limit: "5", skip: 10, sort: { title: "desc" } } } })).toMatchObject({ limit: 5, skip: 10, sort: { title: -1 } });
		expect(plan(adminA, "count", "content:notes", { query: { pagination: { limit: 1 } } })).toMatchObject({ limit: 10, skip: 0, sort: undefined });
	});
});

describe("layer 3: fields that are never queried, whatever the grants", () => {
	test.each([
		[{ password: "x" }, "query field password is not allowed"],
		[{ "password.x": 1 }, "query field password.x is not allowed"],
		[{ $or: [{ username: "a" }, { password: { $exists: true } }] }, "query field password is not allowed"],
		[{ _id: DOC }, "query field _id is not allowed"],
		[{ tenant_ref: "x" }, "query field tenant_ref is not allowed"],
	])("the admin's query %j → 403", (query, message) => {
		expect(refusal(() => plan(adminA, "list", "identity:users", { query: { query } }))).toEqual(forbidden(message));
	});

	test("sort, projection and populate paths too", () => {
		expect(refusal(() => plan(adminA, "list", "identity:users", { query: { pagination: { sort: { password: 1 } } } }))).toEqual(forbidden("sort field password is not allowed"));
		expect(refusal(() => plan(adminA, "list", "identity:users", { query: { pagination: { sort: { _id: 1 } } } }))).toEqual(forbidden("sort field _id is not allowed"));
		expect(refusal(() => plan(adminA, "list", "identity:users", { query: { projection: { password: 1 } } }))).toEqual(forbidden("projection field password is not allowed"));
		expect(refusal(() => plan(adminA, "list", "identity:users", { query: { projection: { _id: 0 } } }))).toEqual(forbidden("projection field _id is not allowed"));
		expect(refusal(() => plan(adminA, "list", "identity:sessions", { query: { query: { refresh: "x" } } }))).toEqual(forbidden("query field refresh is not allowed"));
		expect(refusal(() => plan(adminA, "list", "identity:users", { query: { populate: "_id" } }))).toEqual(forbidden("populate path _id is not allowed"));
	});

	test("a populate's match and select are checked on the target collection, even when the caller holds no grant on it", () => {
		const member = { ...memberA, subject: `${MEMBER_A}@a.example @admin@a.example` };
		expect(refusal(() => plan(member, "list", "identity:profiles", { query: { populate: [{ path: "user", match: { password: "x" } }] } }))).toEqual(
			forbidden("query field password is not allowed"),
		);
		expect(refusal(() => plan(member, "list", "identity:profiles", { query: { populate: { path: "user", select: "username password" } } }))).toEqual(
			forbidden("projection field password is not allowed"),
		);
		// No grant on identity:users (a token scoped to profiles only): still refused, not silently dropped.
		const scoped = { ...member, scope: "read:identity:profiles" };
		expect(refusal(() => plan(scoped, "get", "identity:profiles", { id: DOC, query: { populate: [{ path: "user", select: ["password"] }] } }))).toEqual(
			forbidden("projection field password is not allowed"),
		);
	});
});

describe("layer 3: populate", () => {
	test("a relation with a read grant on its target is kept, with its select and match", () => {
		expect(plan(adminA, "get", "logistic:travels", { id: DOC, query: { populate: "vehicle,driver" } }).populate).toEqual([{ path: "vehicle" }, { path: "driver" }]);
		expect(plan(adminA, "list", "logistic:travels", { query: { populate: JSON.stringify([{ path: "vehicle", select: ["name"], match: { name: "van" } }]) } }).populate).toEqual([
			{ path: "vehicle", select: ["name"], match: { name: "van" } },
		]);
		// Populate is for reads that return documents: a count ignores it.
		expect(plan(adminA, "count", "logistic:travels", { query: { populate: "status" } }).populate).toEqual([]);
	});

	test("without a grant, or a scope, on the target the path is dropped silently", () => {
		expect(plan(placedA, "list", "logistic:travels", { query: { populate: "vehicle" } }).populate).toEqual([]);
		const scoped = { ...adminA, scope: "read:logistic:travels" };
		expect(plan(scoped, "list", "logistic:travels", { query: { populate: "vehicle,origin" } }).populate).toEqual([]);
		const some = { ...adminA, scope: "read:logistic:travels read:logistic:locations" };
		expect(plan(some, "list", "logistic:travels", { query: { populate: "vehicle,origin" } }).populate).toEqual([{ path: "origin" }]);
	});

	test("a hidden relation field → 403; a field that is no relation → 400", () => {
		expect(refusal(() => plan(limitedA, "get", "logistic:travels", { id: DOC, query: { populate: "vehicle" } }))).toEqual(forbidden("populate path vehicle is not allowed"));
		expect(refusal(() => plan(limitedA, "list", "logistic:travels", { query: { populate: "vehicle" } }))).toEqual(forbidden("populate path vehicle is not allowed"));
		expect(refusal(() => plan(limitedA, "list", "logistic:travels", { query: { populate: "status" } }))).toEqual(badRequest("status cannot be populated"));
		expect(refusal(() => plan(adminA, "list", "logistic:travels", { query: { populate: "nothing" } }))).toEqual(badRequest("nothing cannot be populated"));
	});
});

describe("layer 3: groups in a query are reduced to the caller's memberships", () => {
	const groupsOf = (query: unknown) => NOTES_LIST(memberA, { query: { zone: "own", query } }).filter.groups;
	test.each([
		[{ groups: "other@x.example" }, { $in: [] }],
		[{ groups: TEAM }, TEAM],
		[{ groups: { $in: ["other@x.example", TEAM] } }, { $in: [TEAM] }],
		[{ groups: { $regex: "other" } }, { $in: [] }],
		[{ groups: { $exists: true } }, { $in: [] }],
		[{ groups: { $nin: ["other@x.example"] } }, { $in: [] }],
		[{ groups: { $ne: TEAM } }, { $ne: TEAM }],
	])("%j → groups %j", (query, expected) => {
		expect(groupsOf(query)).toEqual(expected);
	});

	test("inside $or too, and a foreign group alone matches nothing even for the tenant admin of another tenant", () => {
		expect(NOTES_LIST(memberA, { query: { zone: "own", query: { $or: [{ groups: "other@x.example" }, { title: "x" }] } } }).filter).toEqual({
			deleted_at: null,
			owner: MEMBER_A,
			content: MEMBER_A,
			$or: [{ groups: { $in: [] } }, { title: "x" }],
		});
		expect(NOTES_LIST(adminB, { query: { zone: "own", query: { groups: TEAM } } }).filter).toEqual({ deleted_at: null, owner: ADMIN_B, groups: { $in: [] } });
	});
});

describe("layer 3: hostile input is refused with a 400 before any decision about rows", () => {
	test.each([
		['{"$where":"this.a"}', "operator $where is not allowed"],
		['{"a":{"$function":"x"}}', "operator $function is not allowed"],
		['{"__proto__":{"admin":true}}', "forbidden key __proto__"],
		['{"a.constructor.b":1}', "forbidden key constructor"],
		['{"a;drop table x":1}', "invalid field name a;drop table x"],
		['{"a\'--":1}', "invalid field name a'--"],
		['{"a\\"b":1}', 'invalid field name a"b'],
		['{"é":1}', "invalid field name é"],
		['{"$or":[]}', "$or must be a non-empty array of objects"],
		["{not json", "query must be valid JSON"],
		["[1]", "query must be a JSON object"],
	])("query %s → 400 %s", (text, message) => {
		expect(refusal(() => NOTES_LIST(adminA, { query: { query: text } }))).toEqual(badRequest(message));
	});

	test("sort, projection and populate: the same names are refused", () => {
		expect(refusal(() => NOTES_LIST(adminA, { query: { pagination: '{"sort":{"__proto__":1}}' } }))).toEqual(badRequest("forbidden key __proto__"));
		expect(refusal(() => NOTES_LIST(adminA, { query: { projection: { "x;--": 1 } } }))).toEqual(badRequest("invalid field name x;--"));
		expect(refusal(() => NOTES_LIST(adminA, { query: { populate: "prototype" } }))).toEqual(badRequest("forbidden key prototype"));
		expect(refusal(() => NOTES_LIST(adminA, { query: { projection: { title: 1, content: 0 } } }))).toEqual(badRequest("projection cannot mix inclusion and exclusion"));
	});

	test("a string value is a value, whatever it holds: it is passed on as data, never as a key", () => {
		const hostile = `'; drop table documents; -- "$where" __proto__ ☃`;
		expect(NOTES_LIST(adminA, { query: { query: { title: hostile } } }).filter).toEqual({ deleted_at: null, ...ownOrShared(ADMIN_A), title: hostile });
	});

	test("the access check comes first: a caller without a grant hears 403, not the query's 400", () => {
		expect(refusal(() => plan(adminB, "list", "logistic:vehicles", { query: { query: "{not json" } }))).toEqual(forbidden("no grant for read on logistic:vehicles"));
	});
});

describe("and(): conditions combined into one filter", () => {
	test("distinct keys merge; colliding keys keep their meaning in $and; id and ref come last", () => {
		expect(and([{ a: 1 }, null, undefined, { b: 2 }])).toEqual({ a: 1, b: 2 });
		expect(and([{ a: 1 }, { a: 2 }])).toEqual({ a: 1, $and: [{ a: 2 }] });
		const f = and([{ id: "x" }, { $and: [{ c: 1 }, { d: 2 }] }, { ref: "r", b: 1 }, { b: 3 }]);
		expect(f).toEqual({ b: 1, $and: [{ c: 1 }, { d: 2 }, { b: 3 }], ref: "r", id: "x" });
		expect(Object.keys(f)).toEqual(["b", "$and", "ref", "id"]);
		expect(and([])).toEqual({});
	});
});
