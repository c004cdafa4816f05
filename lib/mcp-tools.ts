/**
 * The MCP endpoint's tools (docs/mcp.md), made from the catalog: their names, descriptions and JSON schemas, and the
 * REST request each call stands for. A tool call is that request: the same collection action, with the same
 * parameters the gateway's route would pass it (`{ body, query, params }`), so the authority layer decides it exactly
 * as it decides the REST request, and an `idempotency_key` is the request's `Idempotency-Key`.
 */
import { COLLECTIONS, DOMAINS, findCollection, type CollectionDef } from "../catalog";
import { badRequest } from "./errors";
import { isPlainObject } from "./validate";

type Schema = Record<string, unknown>;

/** Tool names: lower-case letters and `_` only. */
export const TOOL_NAME = /^[a-z_]+$/;
/** The longest `q` of a search (the catalog's search specials take 200 characters). */
const SEARCH_Q_MAX = 200;

export interface ToolDef {
	name: string;
	title: string;
	description: string;
	inputSchema: Schema & { type: "object" };
	outputSchema: Schema & { type: "object" };
	annotations: { readOnlyHint?: boolean; destructiveHint?: boolean; idempotentHint?: boolean; openWorldHint: false };
}

/** The REST request a tool call stands for. */
export interface ToolRequest {
	tool: string;
	method: "GET" | "POST" | "PUT" | "PATCH" | "DELETE";
	/** The route's path with the values in place (`/content/notes/<id>`): the request's path for Idempotency-Key. */
	path: string;
	/** The Moleculer action the route calls. */
	action: string;
	/** What the route passes the action. */
	params: { body?: unknown; query: Record<string, unknown>; params: Record<string, string> };
	/** Request headers the domain layers read (`x-can-with-policies`...). */
	headers: Record<string, string>;
	/** The call's `idempotency_key`, sent as the request's `Idempotency-Key`. */
	idempotencyKey?: string;
	/** A page's `skip`, to tell where the next page starts. */
	skip?: number;
}

/** The operations of a collection through the tools, with the grant action each needs. */
export const TOOL_OPS = {
	find: "read",
	get: "read",
	count: "read",
	create: "write",
	update: "write",
	delete: "write",
	restore: "write",
	search: "search",
} as const;
export type ToolOp = keyof typeof TOOL_OPS;

const ALL = COLLECTIONS.map((c) => c.path);
const WRITABLE = COLLECTIONS.filter((c) => !c.collection.platformWritten).map((c) => c.path);
const searchable = (c: CollectionDef) => (c.specials ?? []).some((s) => s.implemented && s.action === "search" && s.path === "search");
const SEARCHABLE = COLLECTIONS.filter((c) => searchable(c.collection)).map((c) => c.path);

/**
 * The tool operations a collection offers (before any grant): create and update only where clients write (the engine
 * answers 405 on the others, as REST), search where it is built.
 */
export function collectionOps(c: CollectionDef): ToolOp[] {
	return (Object.keys(TOOL_OPS) as ToolOp[]).filter((op) => (op === "search" ? searchable(c) : op === "create" || op === "update" ? !c.platformWritten : true));
}

// ---------------------------------------------------------------------------------------------------------------
// Schemas

const collectionArg = (names: string[], what: string): Schema => ({
	type: "string",
	enum: names,
	description: `The collection, \`service/collection\` (${what}); the \`collections\` tool lists the ones you may use`,
});
const idArg: Schema = { type: "string", pattern: "^[0-9a-fA-F]{24}$", description: "The document's id (24 hex digits)" };
const objectArg = (description: string): Schema => ({ type: "object", description });
const zoneArg: Schema = {
	type: "string",
	description: "Ownership zones to read in, comma-separated: own, share, group, client (as the REST `zone` parameter)",
};
const keyArg: Schema = {
	type: "string",
	minLength: 1,
	maxLength: 255,
	pattern: "^[\\x20-\\x7e]+$",
	description: "An Idempotency-Key (1 to 255 printable ASCII characters): the same call with the same key is written once, a repeat answers the first answer",
};
const QUERY = objectArg('A filter in the document-store notation, e.g. {"status": "OPEN", "created_at": {"$gte": "2026-01-01"}}');
const PROJECTION = objectArg('Fields to include ({"title": 1}) or to leave out ({"content": 0}); `id` is always there');
const PAGINATION: Schema = {
	type: "object",
	description: 'One page: `limit` 1-100 (default 10), `skip`, `sort` ({"created_at": -1})',
	properties: { limit: { type: "integer", minimum: 1, maximum: 100 }, skip: { type: "integer", minimum: 0 }, sort: { type: "object" } },
	additionalProperties: false,
};

const DOC: Schema = { type: "object", properties: { id: { type: "string" } }, required: ["id"] };
const PAGE: Schema & { type: "object" } = {
	type: "object",
	properties: {
		items: { type: "array", items: DOC },
		total: { type: "integer", description: "Every match, not only this page's" },
		next: { type: "object", properties: { skip: { type: "integer" } }, required: ["skip"], description: "Where the next page starts, when there is one" },
	},
	required: ["items", "total"],
};
const ONE: Schema & { type: "object" } = { type: "object", properties: { data: DOC }, required: ["data"] };
const COUNT: Schema & { type: "object" } = { type: "object", properties: { total: { type: "integer" } }, required: ["total"] };

const input = (properties: Record<string, Schema>, required: string[]): Schema & { type: "object" } => ({ type: "object", properties, required, additionalProperties: false });
const readOnly = { readOnlyHint: true, openWorldHint: false } as const;

/** Every tool, in the order `tools/list` gives them. */
export const MCP_TOOLS: readonly ToolDef[] = [
	{
		name: "collections",
		title: "Collections you may use",
		description:
			"The collections this token may use: for each, `service/collection`, what it holds, the operations your scope and grants allow (find, get, count, create, update, delete, restore, search) and a JSON schema of the fields you may read. Call it first.",
		inputSchema: input({ service: { type: "string", enum: DOMAINS.map((d) => d.name), description: "Only this service's collections" } }, []),
		outputSchema: {
			type: "object",
			properties: {
				collections: {
					type: "array",
					items: {
						type: "object",
						properties: { collection: { type: "string" }, description: { type: "string" }, operations: { type: "array", items: { type: "string" } }, schema: { type: "object" } },
						required: ["collection", "description", "operations", "schema"],
					},
				},
			},
			required: ["collections"],
		},
		annotations: readOnly,
	},
	{
		name: "find",
		title: "Find documents",
		description: "One page of the documents of a collection that match `query`, as you may read them (GET /<service>/<collection>): `{ items, total, next? }`.",
		inputSchema: input({ collection: collectionArg(ALL, "any"), query: QUERY, projection: PROJECTION, pagination: PAGINATION, zone: zoneArg }, ["collection"]),
		outputSchema: PAGE,
		annotations: readOnly,
	},
	{
		name: "get",
		title: "Get a document",
		description: "One document by its `id`, or by its `ref` (GET /<service>/<collection>/<id>): `{ data }`.",
		inputSchema: input(
			{
				collection: collectionArg(ALL, "any"),
				id: idArg,
				ref: { type: "string", minLength: 1, description: "The document's `ref`, instead of its id" },
				projection: PROJECTION,
				zone: zoneArg,
			},
			["collection"],
		),
		outputSchema: ONE,
		annotations: readOnly,
	},
	{
		name: "count",
		title: "Count documents",
		description: "How many documents of a collection match `query` (GET /<service>/<collection>/count): `{ total }`.",
		inputSchema: input({ collection: collectionArg(ALL, "any"), query: QUERY, zone: zoneArg }, ["collection"]),
		outputSchema: COUNT,
		annotations: readOnly,
	},
	{
		name: "create",
		title: "Create a document",
		description: "Creates one document (POST /<service>/<collection>): `{ data }`, the document as you may read it.",
		inputSchema: input({ collection: collectionArg(WRITABLE, "written by clients"), document: objectArg("The document's fields"), idempotency_key: keyArg }, [
			"collection",
			"document",
		]),
		outputSchema: ONE,
		annotations: { destructiveHint: false, openWorldHint: false },
	},
	{
		name: "update",
		title: "Update a document",
		description: "Changes some fields of one document (PATCH /<service>/<collection>/<id>; `null` clears a field): `{ data }`.",
		inputSchema: input(
			{ collection: collectionArg(WRITABLE, "written by clients"), id: idArg, changes: objectArg("The fields to change"), zone: zoneArg, idempotency_key: keyArg },
			["collection", "id", "changes"],
		),
		outputSchema: ONE,
		annotations: { destructiveHint: true, idempotentHint: true, openWorldHint: false },
	},
	{
		name: "delete",
		title: "Delete a document (soft)",
		description: "Soft-deletes one document (DELETE /<service>/<collection>/<id>): it leaves every read until `restore`. `{ data }`.",
		inputSchema: input({ collection: collectionArg(ALL, "any"), id: idArg, zone: zoneArg, idempotency_key: keyArg }, ["collection", "id"]),
		outputSchema: ONE,
		annotations: { destructiveHint: true, idempotentHint: true, openWorldHint: false },
	},
	{
		name: "restore",
		title: "Restore a document",
		description: "Undoes a soft delete (PUT /<service>/<collection>/<id>/restore): `{ data }`.",
		inputSchema: input({ collection: collectionArg(ALL, "any"), id: idArg, zone: zoneArg, idempotency_key: keyArg }, ["collection", "id"]),
		outputSchema: ONE,
		annotations: { destructiveHint: false, idempotentHint: true, openWorldHint: false },
	},
	{
		name: "search",
		title: "Search documents",
		description:
			"Full-text search in a collection (GET /<service>/<collection>/search): the documents you may read, ranked by relevance of `q` to the text fields you may read, each with its `score`. `{ items, total, next? }`.",
		inputSchema: input(
			{
				collection: collectionArg(SEARCHABLE, "searchable"),
				q: { type: "string", minLength: 1, maxLength: SEARCH_Q_MAX, description: "The words to search for" },
				query: QUERY,
				pagination: PAGINATION,
				zone: zoneArg,
			},
			["collection", "q"],
		),
		outputSchema: PAGE,
		annotations: readOnly,
	},
	{
		name: "can",
		title: "May I?",
		description:
			"Whether this token may do `action` on `object` (`service:collection`), without doing it (POST /auth/can). `fields` asks about those fields too; `subjects` asks for other subjects (needs a read grant on auth:grants); `with_policies` and `with_id_policies` add the grants that decide.",
		inputSchema: input(
			{
				action: { type: "string", minLength: 1, description: "read, write, manage, or a special action (search, send, ...)" },
				object: { type: "string", pattern: "^[a-z][a-z0-9-]*:([a-z][a-z0-9-]*|\\*)$", description: "`service:collection`, e.g. content:notes" },
				fields: { type: "array", items: { type: "string" } },
				subjects: { type: "array", items: { type: "string" } },
				with_policies: { type: "boolean", description: "Add the grants that decide (the header x-can-with-policies)" },
				with_id_policies: { type: "boolean", description: "Add the grants naming your own id (the header x-can-with-id-policies)" },
			},
			["action", "object"],
		),
		outputSchema: {
			type: "object",
			properties: {
				data: {
					type: "object",
					properties: { granted: { type: "boolean" }, policies: { type: "array", items: { type: "object" } }, denied_fields: { type: "array" }, allowed_fields: { type: "array" } },
					required: ["granted"],
				},
			},
			required: ["data"],
		},
		annotations: readOnly,
	},
];

const BY_NAME = new Map(MCP_TOOLS.map((t) => [t.name, t]));
export const toolDef = (tool: string): ToolDef | undefined => BY_NAME.get(tool);

// ---------------------------------------------------------------------------------------------------------------
// A call → its REST request

type Args = Record<string, unknown>;

/** 400 naming the first argument the tool does not take, and those it takes. */
function refuseUnknown(def: ToolDef, args: Args): void {
	const known = Object.keys(def.inputSchema.properties as Schema);
	const unknown = Object.keys(args).find((k) => !known.includes(k));
	if (unknown !== undefined) throw badRequest(`${unknown.slice(0, 64)} is not an argument of ${def.name}; it takes ${known.join(", ")}`);
}

function text(args: Args, key: string, required: boolean, max = 1000): string | undefined {
	const v = args[key];
	if (v === undefined || v === null) {
		if (required) throw badRequest(`${key} is required`);
		return undefined;
	}
	if (typeof v !== "string" || v === "") throw badRequest(`${key} must be a non-empty string`);
	if (v.length > max) throw badRequest(`${key} must be at most ${max} characters`);
	return v;
}

/** A JSON argument: an object (or its JSON text, as the REST query string carries it), passed on for the action to parse. */
function json(args: Args, key: string): unknown {
	const v = args[key];
	if (v === undefined || v === null) return undefined;
	if (isPlainObject(v) || typeof v === "string") return v;
	throw badRequest(`${key} must be a JSON object`);
}

function body(args: Args, key: string): Record<string, unknown> {
	const v = args[key];
	if (!isPlainObject(v)) throw badRequest(`${key} must be a JSON object`);
	return v;
}

/** `zone`: a comma-separated string (or a list of zones). */
function zone(args: Args): string | undefined {
	const v = args.zone;
	if (v === undefined || v === null) return undefined;
	if (Array.isArray(v) && v.every((z) => typeof z === "string")) return v.join(",");
	if (typeof v === "string") return v;
	throw badRequest("zone must be a string: own, share, group, client (comma-separated)");
}

/** `service/collection` of the tool's collections; 400 naming the rule otherwise. */
function collectionOf(def: ToolDef, args: Args): { service: string; collection: string } {
	const raw = text(args, "collection", true, 200)!;
	const allowed = ((def.inputSchema.properties as Record<string, Schema>).collection.enum as string[]) ?? ALL;
	const [service, collection, extra] = raw.split("/");
	if (extra !== undefined || !collection || !findCollection(service, collection))
		throw badRequest(`collection ${raw.slice(0, 100)} is not a collection: name one as service/collection (the collections tool lists them)`);
	if (!allowed.includes(raw)) throw badRequest(`${def.name} does not take ${raw}`);
	return { service, collection };
}

/** Only the parameters given, as a route's parsed query string would hold them. */
function defined(o: Record<string, unknown>): Record<string, unknown> {
	const out: Record<string, unknown> = {};
	for (const [k, v] of Object.entries(o)) if (v !== undefined) out[k] = v;
	return out;
}

function skipOf(pagination: unknown): number {
	let p = pagination;
	if (typeof p === "string") {
		try {
			p = JSON.parse(p);
		} catch {
			return 0;
		}
	}
	const skip = isPlainObject(p) ? p.skip : undefined;
	return typeof skip === "number" && Number.isInteger(skip) && skip > 0 ? skip : 0;
}

/**
 * The REST request a call of `tool` with `args` stands for; 400 (the platform's error) for a call no route would
 * take: an unknown tool or argument, a collection that is not one, an argument of the wrong type. What the arguments
 * say is decided by the action itself (the query's safety, the id's form, the body's fields).
 */
export function toolRequest(tool: string, rawArgs: unknown): ToolRequest {
	const def = BY_NAME.get(tool);
	if (!def) throw badRequest(`unknown tool ${String(tool).slice(0, 64)}; tools: ${MCP_TOOLS.map((t) => t.name).join(", ")}`);
	if (rawArgs !== undefined && rawArgs !== null && !isPlainObject(rawArgs)) throw badRequest("arguments must be a JSON object");
	const args = (rawArgs ?? {}) as Args;
	refuseUnknown(def, args);
	const headers: Record<string, string> = {};
	if (tool === "can") {
		const b = defined({ action: text(args, "action", true, 200), object: text(args, "object", true, 200), fields: args.fields, subjects: args.subjects });
		for (const [arg, header] of [
			["with_policies", "x-can-with-policies"],
			["with_id_policies", "x-can-with-id-policies"],
		]) {
			if (args[arg] !== undefined && typeof args[arg] !== "boolean") throw badRequest(`${arg} must be true or false`);
			if (args[arg] === true) headers[header] = "1";
		}
		return { tool, method: "POST", path: "/auth/can", action: "auth.can", params: { body: b, query: {}, params: {} }, headers };
	}
	if (tool === "collections") {
		const service = text(args, "service", false, 100);
		if (service !== undefined && !DOMAINS.some((d) => d.name === service))
			throw badRequest(`service ${service.slice(0, 64)} is not a service; services: ${DOMAINS.map((d) => d.name).join(", ")}`);
		return { tool, method: "GET", path: "/mcp", action: "", params: { query: defined({ service }), params: {} }, headers };
	}
	const { service, collection } = collectionOf(def, args);
	const base = `/${service}/${collection}`;
	const act = (op: string) => `${service}.${collection}.${op}`;
	const key = tool === "create" || tool === "update" || tool === "delete" || tool === "restore" ? text(args, "idempotency_key", false, 255) : undefined;
	const keyed = key === undefined ? {} : { idempotencyKey: key };
	const z = zone(args);
	switch (tool) {
		case "find": {
			const pagination = json(args, "pagination");
			return {
				tool,
				method: "GET",
				path: base,
				action: act("list"),
				params: { query: defined({ query: json(args, "query"), projection: json(args, "projection"), pagination, zone: z }), params: {} },
				headers,
				skip: skipOf(pagination),
			};
		}
		case "count":
			return { tool, method: "GET", path: `${base}/count`, action: act("count"), params: { query: defined({ query: json(args, "query"), zone: z }), params: {} }, headers };
		case "search": {
			const pagination = json(args, "pagination");
			const q = text(args, "q", true, SEARCH_Q_MAX);
			return {
				tool,
				method: "GET",
				path: `${base}/search`,
				action: act("search"),
				params: { query: defined({ q, query: json(args, "query"), pagination, zone: z }), params: {} },
				headers,
				skip: skipOf(pagination),
			};
		}
		case "get": {
			const id = text(args, "id", false, 100);
			const ref = text(args, "ref", false, 1000);
			if ((id === undefined) === (ref === undefined)) throw badRequest("get takes either id or ref");
			const target = (id ?? ref)!;
			return {
				tool,
				method: "GET",
				path: `${base}/${encodeURIComponent(target)}`,
				action: act("get"),
				params: { query: defined({ projection: json(args, "projection"), zone: z, ref: ref !== undefined ? "true" : undefined }), params: { id: target } },
				headers,
			};
		}
		case "create":
			return { tool, method: "POST", path: base, action: act("create"), params: { body: body(args, "document"), query: {}, params: {} }, headers, ...keyed };
		case "update": {
			const id = text(args, "id", true, 100)!;
			return {
				tool,
				method: "PATCH",
				path: `${base}/${encodeURIComponent(id)}`,
				action: act("patch"),
				params: { body: body(args, "changes"), query: defined({ zone: z }), params: { id } },
				headers,
				...keyed,
			};
		}
		case "delete": {
			const id = text(args, "id", true, 100)!;
			return {
				tool,
				method: "DELETE",
				path: `${base}/${encodeURIComponent(id)}`,
				action: act("remove"),
				params: { query: defined({ zone: z }), params: { id } },
				headers,
				...keyed,
			};
		}
		case "restore": {
			const id = text(args, "id", true, 100)!;
			return {
				tool,
				method: "PUT",
				path: `${base}/${encodeURIComponent(id)}/restore`,
				action: act("restore"),
				params: { query: defined({ zone: z }), params: { id } },
				headers,
				...keyed,
			};
		}
	}
	throw badRequest(`unknown tool ${tool}`);
}
