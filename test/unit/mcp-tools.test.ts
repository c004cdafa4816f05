/**
 * lib/mcp-tools.ts: the MCP tools made from the catalog, and the REST request each call stands for (the same route,
 * action and parameters the gateway passes), with the arguments no route would take refused as 400.
 */
import { COLLECTIONS, findCollection } from "../../catalog";
import { allRoutes } from "../../lib/routes";
import { collectionOps, MCP_TOOLS, TOOL_NAME, toolRequest } from "../../lib/mcp-tools";
import { documentSchema } from "../../lib/openapi";

const collectionEnum = (tool: string) => (MCP_TOOLS.find((t) => t.name === tool)!.inputSchema.properties as any).collection.enum as string[];

test("tool names are [a-z_] only; every schema is an object schema; enums name catalog collections only", () => {
	for (const t of MCP_TOOLS) {
		expect(t.name).toMatch(TOOL_NAME);
		expect(t.inputSchema.type).toBe("object");
		expect(t.outputSchema.type).toBe("object");
	}
	expect(collectionEnum("find")).toEqual(COLLECTIONS.map((c) => c.path));
	expect(collectionEnum("create")).not.toContain("touch/push-histories");
	expect(collectionEnum("search")).toEqual(["content/posts", "conjoint/messages", "career/products"]);
	expect(collectionOps(findCollection("touch", "push-histories")!.collection)).toEqual(["find", "get", "count", "delete", "restore"]);
});

test("each call is the route it stands for: its method, path and action exist in the route table", () => {
	const routes = new Set(allRoutes().map((r) => `${r.method} ${r.action}`));
	const id = "65f1c0a2b3c4d5e6f7a8b9c0";
	const calls: Array<[string, Record<string, unknown>]> = [
		["find", { collection: "content/notes", query: { title: "x" }, pagination: { limit: 5, skip: 10 }, zone: ["own", "client"] }],
		["get", { collection: "content/notes", id, projection: { title: 1 } }],
		["get", { collection: "content/notes", ref: "my-ref" }],
		["count", { collection: "content/notes", query: '{"title":"x"}' }],
		["create", { collection: "content/notes", document: { title: "x" }, idempotency_key: "k1" }],
		["update", { collection: "content/notes", id, changes: { title: "y" } }],
		["delete", { collection: "content/notes", id }],
		["restore", { collection: "content/notes", id }],
		["search", { collection: "content/posts", q: "word" }],
		["can", { action: "read", object: "content:notes", with_policies: true }],
	];
	const got = calls.map(([tool, args]) => toolRequest(tool, args));
	for (const r of got) expect(routes.has(`${r.method} ${r.action}`)).toBe(true);
	expect(got.map((r) => [r.method, r.path, r.action, r.params, r.headers, r.idempotencyKey, r.skip])).toEqual([
		["GET", "/content/notes", "content.notes.list", { query: { query: { title: "x" }, pagination: { limit: 5, skip: 10 }, zone: "own,client" }, params: {} }, {}, undefined, 10],
		["GET", `/content/notes/${id}`, "content.notes.get", { query: { projection: { title: 1 } }, params: { id } }, {}, undefined, undefined],
		["GET", "/content/notes/my-ref", "content.notes.get", { query: { ref: "true" }, params: { id: "my-ref" } }, {}, undefined, undefined],
		["GET", "/content/notes/count", "content.notes.count", { query: { query: '{"title":"x"}' }, params: {} }, {}, undefined, undefined],
		["POST", "/content/notes", "content.notes.create", { body: { title: "x" }, query: {}, params: {} }, {}, "k1", undefined],
		["PATCH", `/content/notes/${id}`, "content.notes.patch", { body: { title: "y" }, query: {}, params: { id } }, {}, undefined, undefined],
		["DELETE", `/content/notes/${id}`, "content.notes.remove", { query: {}, params: { id } }, {}, undefined, undefined],
		["PUT", `/content/notes/${id}/restore`, "content.notes.restore", { query: {}, params: { id } }, {}, undefined, undefined],
		["GET", "/content/posts/search", "content.posts.search", { query: { q: "word" }, params: {} }, {}, undefined, 0],
		["POST", "/auth/can", "auth.can", { body: { action: "read", object: "content:notes" }, query: {}, params: {} }, { "x-can-with-policies": "1" }, undefined, undefined],
	]);
});

test("arguments no route would take answer 400 naming what is wrong", () => {
	const refused = (tool: string, args: unknown) => {
		try {
			toolRequest(tool, args);
		} catch (err) {
			return [(err as { code: number }).code, (err as Error).message];
		}
		return "accepted";
	};
	expect(refused("nope", {})).toEqual([400, "unknown tool nope; tools: collections, find, get, count, create, update, delete, restore, search, can"]);
	expect(refused("find", [])).toEqual([400, "arguments must be a JSON object"]);
	expect(refused("find", {})).toEqual([400, "collection is required"]);
	expect(refused("find", { collection: "content/notes/x" })).toEqual([
		400,
		"collection content/notes/x is not a collection: name one as service/collection (the collections tool lists them)",
	]);
	expect(refused("find", { collection: "__proto__/x" })).toEqual([
		400,
		"collection __proto__/x is not a collection: name one as service/collection (the collections tool lists them)",
	]);
	expect(refused("create", { collection: "touch/push-histories", document: {} })).toEqual([400, "create does not take touch/push-histories"]);
	expect(refused("create", { collection: "content/notes", document: [1] })).toEqual([400, "document must be a JSON object"]);
	expect(refused("update", { collection: "content/notes", changes: {} })).toEqual([400, "id is required"]);
	expect(refused("find", { collection: "content/notes", zone: 3 })).toEqual([400, "zone must be a string: own, share, group, client (comma-separated)"]);
	expect(refused("find", { collection: "content/notes", idempotency_key: "k" })).toEqual([
		400,
		"idempotency_key is not an argument of find; it takes collection, query, projection, pagination, zone",
	]);
	expect(refused("get", { collection: "content/notes", id: "a", ref: "b" })).toEqual([400, "get takes either id or ref"]);
	expect(refused("search", { collection: "content/posts", q: "x".repeat(201) })).toEqual([400, "q must be at most 200 characters"]);
	expect(refused("can", { action: "read", object: "content:notes", with_policies: "yes" })).toEqual([400, "with_policies must be true or false"]);
	expect(refused("collections", { service: "nope" })).toEqual([400, expect.stringMatching(/^service nope is not a service; services: auth, /)]);
});

test("documentSchema shows only the fields given (and id), never a write-only field, with no $ref", () => {
	const users = findCollection("identity", "users")!;
	const all = documentSchema(users.domain, users.collection, null) as { properties: Record<string, unknown> };
	expect(all.properties.password).toBeUndefined();
	expect(all.properties.username).toBeDefined();
	const some = documentSchema(users.domain, users.collection, ["username", "props.color"]) as { properties: Record<string, unknown> };
	expect(Object.keys(some.properties).sort()).toEqual(["id", "props", "username"]);
	expect(JSON.stringify(documentSchema(findCollection("thing", "sensors")!.domain, findCollection("thing", "sensors")!.collection, null))).not.toContain("$ref");
});
