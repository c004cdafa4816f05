/**
 * `/mcp` (docs/mcp.md) with the MCP SDK's own client over HTTP (Client + StreamableHTTPClientTransport): sessions
 * bound to the principal, the tools decided by the authority layer as the REST requests they stand for (scope, grant,
 * fields, zones, foreign ids), Idempotency-Key, the resources, and the gateway's limits (401, body, rate).
 */
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { randomBytes } from "crypto";
import { execFile } from "child_process";
import { readFileSync } from "fs";
import path from "path";
import { bootTenancy, ok, type Tenancy } from "../helpers/tenants";
import { bootPlatform, type TestPlatform } from "../helpers/platform";
import { secondGateway, type SecondGateway } from "../helpers/gateways";
import { MAX_BATCH_REQUESTS, MAX_TOOL_ANSWER_BYTES } from "../../services/api/mcp";
import { JSON_BODY_LIMIT } from "../../services/api/early-answer";
import { openRelational, releaseRelational } from "../../runtime/relational";
import { eventually } from "../helpers/wait";

jest.setTimeout(120_000);

let t: Tenancy;
/** A second gateway node of the same deployment (services: api only). */
let gwB: SecondGateway;
/** Every client a test connected: closed at the end. */
const opened: Client[] = [];

async function connect(token: string | undefined, opts: { url?: string; sessionId?: string } = {}): Promise<{ client: Client; transport: StreamableHTTPClientTransport }> {
	const client = new Client({ name: "platform-test", version: "1.0.0" });
	const transport = new StreamableHTTPClientTransport(new URL(`${opts.url ?? t.p.url}/mcp`), {
		requestInit: { headers: token ? { authorization: `Bearer ${token}` } : {} },
		sessionId: opts.sessionId,
	});
	await client.connect(transport);
	opened.push(client);
	return { client, transport };
}

/** A tool's answer: its structured content, or its refusal's error body (isError), with the text it came as. */
async function call(client: Client, name: string, args: Record<string, unknown>): Promise<{ ok: boolean; data: any; text: string }> {
	const r = (await client.callTool({ name, arguments: args })) as CallToolResult;
	const text = (r.content ?? []).map((c) => (c.type === "text" ? c.text : "")).join("");
	if (r.isError) return { ok: false, data: JSON.parse(text), text };
	expect(JSON.parse(text)).toEqual(r.structuredContent);
	return { ok: true, data: r.structuredContent, text };
}

const error = (statusCode: number, message: string) => ({
	statusCode,
	message,
	error: { 400: "Bad Request", 403: "Forbidden", 404: "Not Found", 401: "Unauthorized", 413: "Payload Too Large" }[statusCode],
});

const initialize = (version = "2025-06-18") => ({
	jsonrpc: "2.0",
	id: 1,
	method: "initialize",
	params: { protocolVersion: version, capabilities: {}, clientInfo: { name: "raw", version: "1" } },
});
const MCP_HEADERS = { accept: "application/json, text/event-stream" };

let noteA: { id: string; title: string };
let noteB: { id: string; title: string };

beforeAll(async () => {
	const id = randomBytes(4).toString("hex");
	t = await bootTenancy({ transporter: "Fake", namespace: `mcp-${id}`, nodeId: `a-${id}` });
	gwB = await secondGateway(t.p, ["auth", "identity", "content"]);
	noteA = (await ok(t.as(t.a.member.token, "POST", "/content/notes", { title: "mcp note of tenant a", content: "alpha body" }), "note a")).data;
	noteB = (await ok(t.as(t.b.member.token, "POST", "/content/notes", { title: "mcp note of tenant b", content: "beta body" }), "note b")).data;
}, 180_000);
afterAll(async () => {
	await Promise.all(opened.map((c) => c.close().catch(() => undefined)));
	await gwB?.stop();
	await t?.cleanup();
});

describe("a session with the SDK's client", () => {
	test("initialize negotiates 2025-06-18, answers Mcp-Session-Id, and lists the tools, named [a-z_] only", async () => {
		const raw = await t.p.http("POST", "/mcp", { token: t.a.member.token, body: initialize(), headers: MCP_HEADERS });
		expect(raw.status).toBe(200);
		expect(raw.body.result.protocolVersion).toBe("2025-06-18");
		expect(raw.body.result.serverInfo.name).toBe("platform-gateway");
		expect(raw.headers.get("mcp-session-id")).toMatch(/^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/);

		const { client, transport } = await connect(t.a.member.token);
		expect(transport.sessionId).toBeDefined();
		expect(client.getServerVersion()?.name).toBe("platform-gateway");
		const tools = (await client.listTools()).tools;
		expect(tools.map((x) => x.name)).toEqual(["collections", "find", "get", "count", "create", "update", "delete", "restore", "search", "can"]);
		for (const x of tools) {
			expect(x.name).toMatch(/^[a-z_]+$/);
			expect(x.outputSchema?.type).toBe("object");
		}
		const find = tools.find((x) => x.name === "find")!;
		expect((find.inputSchema.properties as any).collection.enum).toContain("content/notes");
	});

	test("find returns the notes the principal may read, and nothing of the other tenant", async () => {
		const { client } = await connect(t.a.member.token);
		const r = await call(client, "find", { collection: "content/notes", pagination: { limit: 100 } });
		expect(r.ok).toBe(true);
		expect(r.data.items.map((n: any) => n.id)).toContain(noteA.id);
		expect(r.text).not.toContain(noteB.id);
		expect(r.text).not.toContain("beta body");
		expect(r.data.total).toBe(r.data.items.length);
		// The same answer as REST's list.
		const rest = await ok(t.as(t.a.member.token, "GET", `/content/notes?pagination=${encodeURIComponent(JSON.stringify({ limit: 100 }))}`), "rest list");
		expect(r.data).toEqual(rest);
	});

	test("get, count and search answer as REST does; another tenant's id is 404 as for REST", async () => {
		const { client } = await connect(t.a.member.token);
		expect((await call(client, "get", { collection: "content/notes", id: noteA.id })).data.data).toMatchObject({ id: noteA.id, title: noteA.title, content: "alpha body" });
		expect(await call(client, "get", { collection: "content/notes", id: noteB.id })).toEqual({ ok: false, data: error(404, "document not found"), text: expect.any(String) });
		expect((await call(client, "count", { collection: "content/notes", query: { title: noteA.title } })).data).toEqual({ total: 1 });
		expect((await call(client, "count", { collection: "content/notes", query: { title: noteB.title } })).data).toEqual({ total: 0 });
		await ok(t.as(t.a.admin.token, "POST", "/content/posts", { title: "mcpsearchword in a post" }), "post");
		const s = await call(client, "search", { collection: "content/posts", q: "mcpsearchword" });
		// The member's role (@editor: manage) holds no `search` grant: refused as REST refuses it.
		expect(s).toEqual({ ok: false, data: error(403, "no grant for search on content:posts"), text: expect.any(String) });
		const { client: admin } = await connect(t.a.admin.token);
		// The search index follows the change stream: the post is found once it has been indexed.
		let found = await call(admin, "search", { collection: "content/posts", q: "mcpsearchword" });
		for (let i = 0; i < 50 && found.data.items.length === 0; i++) {
			await new Promise((r) => setTimeout(r, 100));
			found = await call(admin, "search", { collection: "content/posts", q: "mcpsearchword" });
		}
		expect(found.data.items).toHaveLength(1);
		expect(found.data.items[0]).toMatchObject({ title: "mcpsearchword in a post", score: expect.any(Number) });
	});

	test("create, update, delete and restore write as REST does, and a foreign id changes nothing", async () => {
		const { client } = await connect(t.a.member.token);
		const made = await call(client, "create", { collection: "content/notes", document: { title: "made through mcp" } });
		const id = made.data.data.id;
		expect(made.data.data).toMatchObject({ title: "made through mcp", owner: t.a.member.id });
		expect((await call(client, "update", { collection: "content/notes", id, changes: { content: "changed" } })).data.data).toMatchObject({ id, content: "changed" });
		expect((await call(client, "delete", { collection: "content/notes", id })).data.data.deleted_at).toEqual(expect.any(String));
		expect((await t.as(t.a.member.token, "GET", `/content/notes/${id}`)).status).toBe(404);
		expect((await call(client, "restore", { collection: "content/notes", id })).data.data.deleted_at).toBeNull();
		for (const [tool, args] of [
			["update", { changes: { content: "taken" } }],
			["delete", {}],
			["restore", {}],
		] as const)
			expect((await call(client, tool, { collection: "content/notes", id: noteB.id, ...args })).data).toEqual(error(404, "document not found"));
		expect((await ok(t.as(t.b.member.token, "GET", `/content/notes/${noteB.id}`), "b's note")).data).toMatchObject({ content: "beta body", deleted_at: null });
		// Another tenant's id inside a body is the engine's to refuse, as for REST.
		const shared = await call(client, "create", { collection: "content/notes", document: { title: "x", shares: [t.b.member.id] } });
		const restShared = await t.as(t.a.member.token, "POST", "/content/notes", { title: "x", shares: [t.b.member.id] });
		expect(shared.ok ? 200 : shared.data.statusCode).toBe(restShared.status);
		if (!shared.ok) expect(shared.data).toEqual(restShared.body);
	});

	test("idempotency_key: the same call twice writes once; the same key over REST replays it", async () => {
		const { client } = await connect(t.a.member.token);
		const args = { collection: "content/notes", document: { title: "keyed through mcp" }, idempotency_key: "mcp-key-1" };
		const first = await call(client, "create", args);
		const again = await call(client, "create", args);
		expect(again.data).toEqual(first.data);
		const rest = await t.as(t.a.member.token, "POST", "/content/notes", { title: "keyed through mcp" }, { "idempotency-key": "mcp-key-1" });
		expect(rest.status).toBe(200);
		expect(rest.headers.get("idempotent-replayed")).toBe("true");
		expect(rest.body.data.id).toBe(first.data.data.id);
		expect((await call(client, "count", { collection: "content/notes", query: { title: "keyed through mcp" } })).data).toEqual({ total: 1 });
		// The key with another request: 422, nothing written.
		const other = await call(client, "create", { ...args, document: { title: "something else" } });
		expect(other.data).toEqual({ statusCode: 422, message: "idempotency key was used for another request", error: "Unprocessable Entity" });
		// Keys belong to the principal: another user's same key runs its own request.
		const { client: admin } = await connect(t.a.admin.token);
		expect((await call(admin, "create", args)).data.data.id).not.toBe(first.data.data.id);
		const bad = await call(client, "create", { ...args, idempotency_key: "bad\nkey" });
		expect(bad.data).toEqual(error(400, "Idempotency-Key must be 1 to 255 printable ASCII characters"));
	});

	test("bad arguments answer 400 naming them, never a 500", async () => {
		const { client } = await connect(t.a.member.token);
		const cases: Array<[string, Record<string, unknown>, string]> = [
			["find", { collection: "content/nope" }, "collection content/nope is not a collection: name one as service/collection (the collections tool lists them)"],
			["find", { collection: "content/notes", limit: 5 }, "limit is not an argument of find; it takes collection, query, projection, pagination, zone"],
			["find", { collection: "content/notes", query: 5 }, "query must be a JSON object"],
			["find", { collection: "content/notes", query: { $where: "1" } }, "operator $where is not allowed"],
			["find", { collection: "content/notes", pagination: { limit: 1000 } }, "pagination.limit must be at most 100"],
			["create", { collection: "content/notes", document: { title: "x", nope: 1 } }, "nope is not a field of notes"],
			["search", { collection: "content/notes", q: "x" }, "search does not take content/notes"],
			["get", { collection: "content/notes" }, "get takes either id or ref"],
			["count", { collection: "content/notes", query: { "a.__proto__.b": 1 } }, ""],
		];
		for (const [tool, args, message] of cases) {
			const r = await call(client, tool, args);
			expect(r.ok).toBe(false);
			expect(r.data.statusCode).toBeGreaterThanOrEqual(400);
			expect(r.data.statusCode).toBeLessThan(500);
			if (message) expect(r.data.message).toBe(message);
		}
		// A batch beyond MAX_BATCH_REQUESTS: 400 before anything runs.
		const { transport } = await connect(t.a.member.token);
		const list = (id: number) => ({ jsonrpc: "2.0", id, method: "tools/list" });
		const many = await t.p.http("POST", "/mcp", {
			token: t.a.member.token,
			body: Array.from({ length: MAX_BATCH_REQUESTS + 1 }, (_, i) => list(i)),
			headers: { ...MCP_HEADERS, "mcp-session-id": transport.sessionId! },
		});
		expect([many.status, many.body]).toEqual([400, error(400, `a batch holds at most ${MAX_BATCH_REQUESTS} requests, not ${MAX_BATCH_REQUESTS + 1}`)]);
		// An unknown tool: an isError result naming the tools (400).
		await expect(client.callTool({ name: "drop_everything", arguments: {} })).resolves.toMatchObject({ isError: true });
	});
});

describe("scopes, grants and fields decide every tool", () => {
	test("an APT with read:content:notes finds notes, and create answers isError naming the missing scope", async () => {
		const apt = (await ok(t.as(t.a.member.token, "POST", "/auth/apts", { name: "mcp reader", scopes: ["read:content:notes"] }), "apt")).data.token as string;
		const { client } = await connect(apt);
		const found = await call(client, "find", { collection: "content/notes", query: { id: noteA.id } });
		expect(found.data.items.map((n: any) => n.id)).toEqual([noteA.id]);
		const made = await call(client, "create", { collection: "content/notes", document: { title: "not allowed" } });
		expect(made).toEqual({
			ok: false,
			data: error(403, "token scope does not cover write:content:notes"),
			text: JSON.stringify(error(403, "token scope does not cover write:content:notes")),
		});
		expect((await call(client, "find", { collection: "content/tickets" })).data).toEqual(error(403, "token scope does not cover read:content:tickets"));
		// collections: what the APT may do, and nothing it may not.
		const cols = (await call(client, "collections", {})).data.collections;
		expect(cols.map((c: any) => [c.collection, c.operations])).toEqual([["content/notes", ["find", "get", "count"]]]);
	});

	test("docs/mcp.md's program, run as written (Node, the SDK's client), connects with an APT and lists and reads notes", async () => {
		const apt = (await ok(t.as(t.a.member.token, "POST", "/auth/apts", { name: "docs example", scopes: ["read:content:notes"] }), "apt")).data.token as string;
		const doc = readFileSync(path.join(__dirname, "../../docs/mcp.md"), "utf8");
		const program = doc
			.match(/```ts\n([\s\S]*?)```/)![1]
			.replace(/^ {3}/gm, "")
			.split("http://localhost:3010")
			.join(t.p.url);
		const out = await new Promise<string>((resolve, reject) =>
			execFile(
				process.execPath,
				["--input-type=module", "-e", program],
				{ cwd: path.join(__dirname, "../.."), env: { ...process.env, PLATFORM_APT: apt }, timeout: 30_000 },
				(err, stdout, stderr) => (err ? reject(new Error(`${err.message}\n${stderr}`)) : resolve(stdout)),
			),
		);
		expect(out).toContain("'collections', 'find'");
		expect(out).toContain(noteA.title);
		expect(out).not.toContain(noteB.title);
	});

	test("a user without grants gets the REST refusal for find; a field-limited user gets only its fields, in results and schema", async () => {
		const limited = t.a.limited;
		const { client } = await connect(limited.token);
		expect((await call(client, "find", { collection: "content/notes" })).data).toEqual(error(403, "no grant for read on content:notes"));
		expect((await call(client, "collections", {})).data).toEqual({ collections: [] });

		await t.grant(t.a.admin.token, { subject: limited.subject, action: "read", object: "content:notes", field: ["title"] });
		await waitForGrant(() => call(client, "find", { collection: "content/notes" }));
		// The notes of the tenant's other users: in the client zone.
		const r = await call(client, "find", { collection: "content/notes", zone: "client", pagination: { limit: 100 } });
		expect(r.data.items.length).toBeGreaterThan(0);
		for (const n of r.data.items) expect(Object.keys(n).sort()).toEqual(["id", "title"]);
		expect(r.text).not.toContain("alpha body");
		expect(r.text).not.toContain('"content"');
		expect((await call(client, "get", { collection: "content/notes", id: noteA.id, zone: "client" })).data).toEqual({ data: { id: noteA.id, title: noteA.title } });
		// A hidden field named in a query, a projection or a sort is refused as REST refuses it.
		expect((await call(client, "find", { collection: "content/notes", query: { content: "alpha body" } })).data).toEqual(error(403, "query field content is not allowed"));
		expect((await call(client, "count", { collection: "content/notes", query: { content: "alpha body" } })).data).toEqual(error(403, "query field content is not allowed"));
		const cols = (await call(client, "collections", {})).data.collections;
		expect(cols).toEqual([{ collection: "content/notes", description: "Notes", operations: ["find", "get", "count"], schema: expect.any(Object) }]);
		expect(Object.keys(cols[0].schema.properties).sort()).toEqual(["id", "title"]);
	});

	test("can answers /auth/can's question for the token", async () => {
		const { client } = await connect(t.a.member.token);
		expect((await call(client, "can", { action: "read", object: "content:notes" })).data).toEqual({ data: { granted: true } });
		expect((await call(client, "can", { action: "search", object: "content:posts" })).data).toEqual({ data: { granted: false } });
		const rest = await ok(t.as(t.a.member.token, "POST", "/auth/can", { action: "write", object: "content:notes" }, { "x-can-with-policies": "1" }), "can");
		expect((await call(client, "can", { action: "write", object: "content:notes", with_policies: true })).data).toEqual(rest);
	});
});

/** Until a grant made a moment ago is in force on the gateway (the grant index reloads on `authority.changed`). */
async function waitForGrant(probe: () => Promise<{ ok: boolean }>): Promise<void> {
	for (let i = 0; i < 50 && !(await probe()).ok; i++) await new Promise((r) => setTimeout(r, 100));
}

describe("sessions and the HTTP edge", () => {
	test("no token, or a token that is none: 401 with WWW-Authenticate, in the API's error shape", async () => {
		for (const token of [undefined, "not-a-token"]) {
			const r = await t.p.http("POST", "/mcp", { token, body: initialize(), headers: MCP_HEADERS });
			expect(r.status).toBe(401);
			expect(r.body).toEqual(error(401, "authorization token is required"));
			expect(r.headers.get("www-authenticate")).toBe(token ? 'Bearer error="invalid_token", error_description="not a token of this platform"' : "Bearer");
		}
		await expect(connect(undefined)).rejects.toThrow(/401|Unauthorized/);
	});

	test("a session presented with another user's token is refused; the same principal's other token keeps it", async () => {
		const { transport } = await connect(t.a.member.token);
		const sessionId = transport.sessionId!;
		for (const other of [t.a.admin.token, t.b.member.token]) {
			const { client } = await connect(other, { sessionId });
			await expect(client.callTool({ name: "find", arguments: { collection: "content/notes" } })).rejects.toThrow(/403/);
			const raw = await t.p.http("POST", "/mcp", { token: other, body: { jsonrpc: "2.0", id: 2, method: "tools/list" }, headers: { ...MCP_HEADERS, "mcp-session-id": sessionId } });
			expect(raw.status).toBe(403);
			expect(raw.body).toEqual(error(403, "this MCP session belongs to another principal: initialize a session with this token"));
		}
		// A fresh login of the same user is the same principal.
		const again = await t.login(t.a, t.a.member.username, t.a.member.password);
		const { client } = await connect(again, { sessionId });
		expect((await call(client, "count", { collection: "content/notes", query: { id: noteA.id } })).data).toEqual({ total: 1 });
	});

	test("a request without a session, with a made-up one, after DELETE, or with another protocol version is refused", async () => {
		const list = { jsonrpc: "2.0", id: 2, method: "tools/list" };
		const token = t.a.member.token;
		const none = await t.p.http("POST", "/mcp", { token, body: list, headers: MCP_HEADERS });
		expect(none.status).toBe(400);
		expect(none.body.message).toBe("Mcp-Session-Id is required: send initialize first, then its Mcp-Session-Id with every request");
		const madeUp = await t.p.http("POST", "/mcp", { token, body: list, headers: { ...MCP_HEADERS, "mcp-session-id": "abc.def" } });
		expect([madeUp.status, madeUp.body]).toEqual([404, error(404, "MCP session not found: initialize a new one")]);
		const { client, transport } = await connect(token);
		const sessionId = transport.sessionId!;
		const version = await t.p.http("POST", "/mcp", { token, body: list, headers: { ...MCP_HEADERS, "mcp-session-id": sessionId, "mcp-protocol-version": "2025-03-26" } });
		expect([version.status, version.body.message]).toEqual([400, `MCP-Protocol-Version 2025-03-26 is not this session's (${transport.protocolVersion})`]);
		await transport.terminateSession();
		const after = await t.p.http("POST", "/mcp", { token, body: list, headers: { ...MCP_HEADERS, "mcp-session-id": sessionId } });
		expect([after.status, after.body]).toEqual([404, error(404, "MCP session not found: initialize a new one")]);
		await client.close();
		const get = await t.p.http("GET", "/mcp", { token });
		expect([get.status, get.headers.get("allow")]).toEqual([405, "POST, DELETE"]);
	});

	test("a body over 1 MB answers 413 before the MCP server sees it", async () => {
		const { transport } = await connect(t.a.member.token);
		const big = {
			jsonrpc: "2.0",
			id: 3,
			method: "tools/call",
			params: { name: "create", arguments: { collection: "content/notes", document: { title: "x", content: "y".repeat(JSON_BODY_LIMIT) } } },
		};
		const r = await t.p.http("POST", "/mcp", { token: t.a.member.token, body: big, headers: { ...MCP_HEADERS, "mcp-session-id": transport.sessionId! } });
		expect([r.status, r.body]).toEqual([413, error(413, "body must not be larger than 1 MiB")]);
	});

	test("an answer is one page, bounded: next.skip says where the rest starts", async () => {
		await ok(
			t.as(t.a.admin.token, "POST", "/content/tickets/bulk", { items: Array.from({ length: 30 }, (_, i) => ({ title: `big ${i}`, content: "z".repeat(20_000) })) }),
			"tickets",
		);
		const { client } = await connect(t.a.admin.token);
		const r = await call(client, "find", { collection: "content/tickets", query: { title: { $regex: "^big " } }, pagination: { limit: 30 } });
		expect(r.data.total).toBe(30);
		expect(r.data.items.length).toBeLessThan(30);
		expect(Buffer.byteLength(JSON.stringify(r.data))).toBeLessThanOrEqual(MAX_TOOL_ANSWER_BYTES);
		expect(r.data.next).toEqual({ skip: r.data.items.length });
		const rest = await call(client, "find", { collection: "content/tickets", query: { title: { $regex: "^big " } }, projection: { title: 1 }, pagination: { limit: 30 } });
		expect([rest.data.items.length, rest.data.next]).toEqual([30, undefined]);
	});

	test("resources: the OpenAPI document and the pages api, security and mcp", async () => {
		const { client } = await connect(t.a.member.token);
		const list = (await client.listResources()).resources.map((r) => r.uri);
		expect(list).toEqual(["platform://openapi.json", "platform://docs/api.md", "platform://docs/security.md", "platform://docs/mcp.md"]);
		const api = await client.readResource({ uri: "platform://openapi.json" });
		expect(JSON.parse((api.contents[0] as { text: string }).text).openapi).toBe("3.1.0");
		const mcp = await client.readResource({ uri: "platform://docs/mcp.md" });
		expect((mcp.contents[0] as { text: string }).text).toContain("# MCP");
		await expect(client.readResource({ uri: "file:///etc/passwd" })).rejects.toThrow(/no resource/);
	});
});

describe("audit and metrics", () => {
	test("a tool call writes the audit row of the REST request it stands for; /mcp is counted in the metrics", async () => {
		const { client } = await connect(t.a.admin.token);
		const id = (await call(client, "create", { collection: "content/notes", document: { title: "audited through mcp" } })).data.data.id;
		expect((await call(client, "get", { collection: "content/notes", id: noteB.id })).data).toEqual(error(404, "document not found"));
		const db = await openRelational(t.p.cfg);
		try {
			const rows = await eventually(
				() =>
					db
						.query<Record<string, unknown>>(
							"select method, path, status, action, document_id, uid from audit_entries where kind = 'request' and document_id in ($1, $2) and uid = $3 order by at",
							[id, noteB.id, t.a.admin.id],
						)
						.then((r) => r.rows),
				(r) => r.length >= 2,
			);
			expect(rows).toEqual([
				{ method: "POST", path: "/content/notes", status: 200, action: "content.notes.create", document_id: id, uid: t.a.admin.id },
				{ method: "GET", path: `/content/notes/${noteB.id}`, status: 404, action: "content.notes.get", document_id: noteB.id, uid: t.a.admin.id },
			]);
		} finally {
			await releaseRelational(t.p.cfg);
		}
		const metrics = await t.p.http("GET", "/metrics");
		expect(metrics.text).toMatch(/gateway_http_requests_total\{[^}]*route="\/mcp"[^}]*\} \d+/);
	});
});

describe("across gateway nodes", () => {
	test("a session opened on one gateway goes on on another, still bound to its principal; DELETE on one closes it on both", async () => {
		const urlB = gwB.node.url!;
		const { transport } = await connect(t.a.member.token);
		const sessionId = transport.sessionId!;
		const { client: onB } = await connect(t.a.member.token, { url: urlB, sessionId });
		expect((await call(onB, "get", { collection: "content/notes", id: noteA.id })).data.data).toMatchObject({ id: noteA.id, title: noteA.title });
		expect((await call(onB, "get", { collection: "content/notes", id: noteB.id })).data).toEqual(error(404, "document not found"));
		const { client: thief } = await connect(t.b.member.token, { url: urlB, sessionId });
		await expect(thief.callTool({ name: "find", arguments: { collection: "content/notes" } })).rejects.toThrow(/403/);
		await transport.terminateSession();
		await expect(onB.callTool({ name: "count", arguments: { collection: "content/notes" } })).rejects.toThrow(/404/);
	});
});

describe("RATE_LIMIT counts MCP requests per principal, with REST's", () => {
	let p: TestPlatform;
	beforeAll(async () => {
		// 4 requests, then one every 100 s: nothing refills during the test.
		p = await bootPlatform({ rateLimit: { rate: 0.01, burst: 4 } });
	}, 120_000);
	afterAll(async () => {
		await p?.cleanup();
	});

	test("each request of a batch counts; past the burst, 429 with Retry-After, on REST too", async () => {
		const token = await p.rootToken();
		const init = await p.http("POST", "/mcp", { token, body: initialize(), headers: MCP_HEADERS });
		expect(init.status).toBe(200);
		const session = { ...MCP_HEADERS, "mcp-session-id": init.headers.get("mcp-session-id")!, "mcp-protocol-version": "2025-06-18" };
		const count = (id: number) => ({ jsonrpc: "2.0", id, method: "tools/call", params: { name: "count", arguments: { collection: "content/notes" } } });
		// The request counts once, its second request once more: 3 of 4.
		const batch = await p.http("POST", "/mcp", { token, body: [count(2), count(3)], headers: session });
		expect(batch.status).toBe(200);
		expect(batch.body.map((m: any) => m.result.structuredContent)).toEqual([{ total: 0 }, { total: 0 }]);
		// 4 of 4, then a fifth and sixth: refused.
		const last = await p.http("POST", "/mcp", { token, body: [count(4), count(5), count(6)], headers: session });
		expect([last.status, last.body]).toEqual([429, { statusCode: 429, message: "too many requests", error: "Too Many Requests" }]);
		expect(Number(last.headers.get("retry-after"))).toBeGreaterThan(0);
		const rest = await p.http("GET", "/content/notes/count", { token });
		expect(rest.status).toBe(429);
	});
});
