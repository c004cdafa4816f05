/**
 * The document cache behind `get` (stores/doc-cache.ts, engine/answer-cache.ts): a read never answers a document older
 * than a write that committed before the read began, whoever wrote it (this node, another node on the same database,
 * SQL outside the platform), and the cache never decides who may read: grants, fields and tenants are decided for
 * every read.
 *
 * Two platforms (A and B) on one PostgreSQL server database: each runs every service with a cache of its own, as two
 * nodes of a deployment do. Reads through B after writes through A must show the writes at once.
 */
import fc from "fast-check";
import { Client } from "pg";
import { client, needServers, siblingDataDir, type HttpResult } from "../helpers/platform";
import { bootTenancy, ok, type Tenancy } from "../helpers/tenants";
import { startPlatform, type Platform } from "../../platform";
import { docCacheStats } from "../../stores/doc-cache";
import { rmSync } from "fs";

jest.setTimeout(240_000);

const { describe } = needServers(["PostgreSQL", 5432]);

describe("the document cache of get", () => {
	let t: Tenancy;
	let b: Platform;
	let bDir: string;
	let sql: Client;
	const A = (token: string, method: string, path: string, body?: unknown) => t.as(token, method, path, body);
	const B = (token: string, method: string, path: string, body?: unknown): Promise<HttpResult> => client(b.url!)(method, path, { token, body });

	beforeAll(async () => {
		t = await bootTenancy();
		bDir = siblingDataDir(t.p.dataDir);
		b = await startPlatform({ ...t.p.cfg, dataDir: bDir, nodeId: `b-${t.p.broker.nodeID}`, port: 0 });
		sql = new Client({ connectionString: t.p.cfg.databaseUrl });
		await sql.connect();
	});
	afterAll(async () => {
		await sql?.end();
		await b?.stop();
		if (bDir) rmSync(bDir, { recursive: true, force: true });
		await t?.cleanup();
	});

	const note = async (token: string, fields: Record<string, unknown> = {}) =>
		(await ok(A(token, "POST", "/content/notes", { title: "first", ...fields }), "note")).data.id as string;
	/** Reads until the cache serves (the listener of a new node may still be starting). */
	async function hitThrough(read: () => Promise<HttpResult>): Promise<HttpResult> {
		for (let i = 0; i < 50; i++) {
			const before = docCacheStats().hits;
			const r = await read();
			if (docCacheStats().hits > before) return r;
			await new Promise((res) => setTimeout(res, 100));
		}
		throw new Error("the cache never served");
	}

	test("a write through node A is read at once through node B, every time", async () => {
		const admin = t.a.admin.token;
		const id = await note(admin);
		const path = `/content/notes/${id}`;
		const first = await hitThrough(() => B(admin, "GET", path));
		expect(first.status).toBe(200);
		expect(first.body.data.title).toBe("first");
		for (let i = 0; i < 40; i++) {
			await ok(A(admin, "PATCH", path, { title: `v${i}` }), "patch");
			const r = await B(admin, "GET", path);
			expect([r.status, r.body.data.title]).toEqual([200, `v${i}`]);
			// And again, from the cache.
			const again = await B(admin, "GET", path);
			expect([again.status, again.body.data.title, again.headers.get("etag")]).toEqual([200, `v${i}`, r.headers.get("etag")]);
		}
		await ok(A(admin, "DELETE", path), "remove");
		expect((await B(admin, "GET", path)).status).toBe(404);
	});

	test("a write made outside the platform (SQL on the table) is read at once", async () => {
		const admin = t.a.admin.token;
		const id = await note(admin, { title: "platform" });
		const path = `/content/notes/${id}`;
		await hitThrough(() => B(admin, "GET", path));
		await sql.query(`update "docs/content/notes" set doc = jsonb_set(doc, '{title}', '"by hand"') where id = $1`, [id]);
		expect((await B(admin, "GET", path)).body.data.title).toBe("by hand");
		expect((await A(admin, "GET", path)).body.data.title).toBe("by hand");
		await sql.query(`delete from "docs/content/notes" where id = $1`, [id]);
		expect((await B(admin, "GET", path)).status).toBe(404);
	});

	test("only collections notify: the platform's own stores (consumer positions, the audit spool) carry no trigger", async () => {
		const triggers = async (table: string) =>
			(
				await sql.query<{ n: number }>(
					"select count(*)::int as n from pg_trigger t join pg_proc p on p.oid = t.tgfoid where t.tgrelid = to_regclass($1) and p.proname = 'platform_docs_changed_v1'",
					[`"${table}"`],
				)
			).rows[0].n;
		expect(await triggers("docs/content/notes")).toBe(4);
		for (const internal of ["docs/_stream_offsets", "docs/_audit_spool"]) {
			expect((await sql.query("select to_regclass($1)::text as r", [`"${internal}"`])).rows[0].r).not.toBeNull();
			expect([internal, await triggers(internal)]).toEqual([internal, 0]);
		}
		// A write to an internal table sends nothing on the documents' channel.
		const listener = new Client({ connectionString: t.p.cfg.databaseUrl });
		await listener.connect();
		const heard: string[] = [];
		listener.on("notification", (m) => heard.push(m.payload ?? ""));
		await listener.query("listen platform_docs");
		await sql.query(`update "docs/_stream_offsets" set doc = doc where true`);
		await sql.query(`update "docs/content/notes" set doc = doc where false`);
		const id = await note(t.a.admin.token);
		await new Promise((r) => setTimeout(r, 300));
		await listener.end();
		expect(heard.some((p) => p.startsWith("docs/_"))).toBe(false);
		expect(heard.some((p) => p.startsWith("docs/content/notes ") && p.includes(id))).toBe(true);
	});

	test("a cached body is byte for byte the body a read from the database gives", async () => {
		const admin = t.a.admin.token;
		const id = await note(admin, { title: "bytes", content: 'quotes " and \\ and é and \u2028', tags: ["x", "y"] });
		const path = `/content/notes/${id}`;
		const miss = await A(admin, "GET", path);
		const hit = await hitThrough(() => A(admin, "GET", path));
		expect(hit.text).toBe(miss.text);
		expect(hit.headers.get("content-type")).toBe(miss.headers.get("content-type"));
		expect(hit.headers.get("etag")).toBe(miss.headers.get("etag"));
		const cond = await A(admin, "GET", path);
		expect((await t.as(admin, "GET", path, undefined, { "if-none-match": cond.headers.get("etag")! })).status).toBe(304);
	});

	test("the cache decides nothing: another tenant, a narrowed grant and a removed grant take effect at the next read", async () => {
		const id = await note(t.a.admin.token, { title: "visible", content: "hidden later", shares: [t.a.limited.id] });
		const path = `/content/notes/${id}`;
		// Filled and served to tenant a's admin.
		await hitThrough(() => A(t.a.admin.token, "GET", path));
		// Tenant b's admin and member: the id of a kept document of another tenant is not found; its limited user, who
		// holds no grant on notes, is refused before any document is read.
		for (const u of [t.b.admin, t.b.member]) expect((await A(u.token, "GET", path)).status).toBe(404);
		expect((await A(t.b.limited.token, "GET", path)).status).toBe(403);
		// The limited user of tenant a reads with the fields its grant gives, from the same kept document.
		const grant = await t.grant(t.a.admin.token, { subject: t.a.limited.subject, action: "read", object: "content:notes", field: ["title"] });
		const limited = await t.login(t.a, t.a.limited.username, t.a.limited.password);
		const seen = await hitThrough(() => A(limited, "GET", path));
		expect(seen.status).toBe(200);
		expect(seen.body.data).toEqual({ id, title: "visible" });
		expect(seen.text).not.toContain("hidden later");
		// The admin still reads every field from it.
		expect((await A(t.a.admin.token, "GET", path)).body.data.content).toBe("hidden later");
		// The grant removed: the next read is refused (the document is still kept).
		await ok(A(t.a.admin.token, "DELETE", `/auth/grants/${grant.id}`), "grant removed");
		const after = await A(limited, "GET", path);
		expect(after.status).toBe(403);
		expect(after.text).not.toContain("visible");
	});

	test("a listener cut by the server: nothing stale is served, and the cache serves again", async () => {
		const admin = t.a.admin.token;
		const id = await note(admin, { title: "before the cut" });
		const path = `/content/notes/${id}`;
		await hitThrough(() => B(admin, "GET", path));
		await sql.query(`select pg_terminate_backend(pid) from pg_stat_activity where datname = current_database() and query = 'listen platform_docs'`);
		await sql.query(`update "docs/content/notes" set doc = jsonb_set(doc, '{title}', '"during the cut"') where id = $1`, [id]);
		expect((await B(admin, "GET", path)).body.data.title).toBe("during the cut");
		expect((await A(admin, "GET", path)).body.data.title).toBe("during the cut");
		const served = await hitThrough(() => B(admin, "GET", path));
		expect(served.body.data.title).toBe("during the cut");
	});

	test("model: random writes through A, B and SQL and reads through both always answer the latest committed state", async () => {
		const admin = t.a.admin.token;
		const ids = [await note(admin, { title: "m0" }), await note(admin, { title: "m1" }), await note(admin, { title: "m2" })];
		const model = new Map<string, string | null>(ids.map((id, i) => [id, `m${i}`]));
		let n = 0;
		type Cmd = { kind: "patch" | "sql" | "remove" | "renew" | "read"; node: "A" | "B"; doc: number; tenant: "a" | "b" };
		const cmd = fc.record<Cmd>({
			kind: fc.constantFrom("patch", "sql", "remove", "renew", "read", "read", "read"),
			node: fc.constantFrom("A", "B"),
			doc: fc.integer({ min: 0, max: 2 }),
			tenant: fc.constantFrom("a", "a", "a", "b"),
		});
		await fc.assert(
			fc.asyncProperty(fc.array(cmd, { minLength: 5, maxLength: 25 }), async (cmds) => {
				for (const c of cmds) {
					const id = ids[c.doc];
					const path = `/content/notes/${id}`;
					const via = c.node === "A" ? A : B;
					const live = model.get(id) !== null;
					if (c.kind === "patch" && live) {
						const title = `t${++n}`;
						await ok(via(admin, "PATCH", path, { title }), "patch");
						model.set(id, title);
					} else if (c.kind === "sql" && live) {
						const title = `s${++n}`;
						await sql.query(`update "docs/content/notes" set doc = jsonb_set(doc, '{title}', to_jsonb($2::text)) where id = $1`, [id, title]);
						model.set(id, title);
					} else if (c.kind === "remove" && live) {
						await ok(via(admin, "DELETE", path), "remove");
						model.set(id, null);
					} else if (c.kind === "renew" && !live) {
						ids[c.doc] = await note(admin, { title: `r${++n}` });
						model.set(ids[c.doc], `r${n}`);
					} else if (c.kind === "read") {
						const token = c.tenant === "a" ? admin : t.b.admin.token;
						const r = await via(token, "GET", path);
						const want = model.get(id);
						if (c.tenant === "b" || want === null) expect(r.status).toBe(404);
						else expect([r.status, r.body.data.title]).toEqual([200, want]);
					}
				}
			}),
			{ numRuns: 12 },
		);
		expect(docCacheStats().hits).toBeGreaterThan(0);
	});
});
