/**
 * Issue 34 item 1: one document store. A DATA_DIR of an earlier version holds NeDB files (JSON lines, written here by
 * hand in NeDB's format: a later line of an `_id` replaces the earlier, `{"$$deleted": true}` removes, index lines,
 * dates as `{"$$date": ms}`, a corrupt line): the platform refuses to start on it and names the command; `npm run
 * migrate-store` (refused while it runs... here: while the directory is held) copies every document, login and tenant
 * into PostgreSQL and moves the files aside; the directory then starts with every login and document intact, and a
 * second run copies nothing.
 *
 * The documents are a real platform's: a platform on PostgreSQL makes tenants, users, grants and notes, its stores
 * are read out and written as NeDB files into a DATA_DIR that holds only its keys and bootstrap.json.
 */
import { spawn } from "child_process";
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "fs";
import path from "path";
import { bootPlatform, tempDir, type TestPlatform } from "../helpers/platform";
import { bootTenancy, ok, type Tenancy } from "../helpers/tenants";
import { createStore, TENANT_REF, type StoredDoc } from "../../stores";
import { sharedOutbox } from "../../events/outbox";
import { storeNames } from "../../runtime/store-names";
import { nedbDocumentStores, nedbFileOf, readNedbFile, unmigratedDataDir } from "../../store-migration";

const ROOT = path.resolve(__dirname, "../..");

interface Run {
	code: number | null;
	out: string;
}

/** `node --import tsx <script>` with DATA_DIR and neither DATABASE_URL nor DOCUMENT_STORE: its exit and output. */
function run(script: string, dataDir: string, extra: Record<string, string> = {}): Promise<Run> {
	const env: NodeJS.ProcessEnv = { ...process.env, DATA_DIR: dataDir, LOG_LEVEL: "warn", HOST: "127.0.0.1", PORT: "0", MQTT_PORT: "0", ...extra };
	for (const k of ["DOCUMENT_STORE", "DATABASE_URL", "MONGO_URI"]) if (!(k in extra)) delete env[k];
	const proc = spawn(process.execPath, ["--import", "tsx", script], { cwd: ROOT, env, stdio: ["ignore", "pipe", "pipe"] });
	const r: Run = { code: null, out: "" };
	proc.stdout!.on("data", (c) => (r.out += c));
	proc.stderr!.on("data", (c) => (r.out += c));
	return new Promise((resolve) => proc.once("exit", (code) => resolve(Object.assign(r, { code }))));
}

/** One NeDB line of a document: JSON, with the dates NeDB wrote as `{"$$date": ms}` for the `*_at` fields named. */
const line = (doc: Record<string, unknown>, dates: string[] = []) =>
	JSON.stringify(Object.fromEntries(Object.entries(doc).map(([k, v]) => [k === "id" ? "_id" : k, dates.includes(k) && typeof v === "string" ? { $$date: Date.parse(v) } : v])));

describe("a DATA_DIR of NeDB files", () => {
	let t: Tenancy;
	let dataDir: string;
	/** Every document of every store, as the platform stored it on PostgreSQL. */
	const before: Record<string, StoredDoc[]> = {};
	const notes: Record<string, string> = {};
	let events = 0;
	let p: TestPlatform | undefined;

	beforeAll(async () => {
		t = await bootTenancy();
		dataDir = t.p.dataDir;
		for (const x of [t.a, t.b]) notes[x.name] = (await ok(t.as(x.member.token, "POST", "/content/notes", { title: `note of ${x.name}`, ref: `ref-${x.name}` }), "note")).data.id;
		const gone = (await ok(t.as(t.a.admin.token, "POST", "/content/notes", { title: "deleted" }), "note")).data.id;
		await ok(t.as(t.a.admin.token, "DELETE", `/content/notes/${gone}`), "delete");
		notes.deleted = gone;
		for (const name of storeNames().filter((n) => n !== "_outbox")) {
			const s = createStore(t.p.cfg, name);
			await s.connect();
			const docs = await s.find({ query: {}, sort: { id: 1 } });
			await s.disconnect();
			if (docs.length) before[name] = docs;
		}
		const records = await sharedOutbox(t.p.cfg).readFrom(0, 100_000);
		await t.p.stop();

		// The NeDB files of these documents, in the directory that keeps only the keys and bootstrap.json.
		for (const [name, docs] of Object.entries(before)) {
			const file = nedbFileOf(dataDir, name);
			mkdirSync(path.dirname(file), { recursive: true });
			const lines = ['{"$$indexCreated":{"fieldName":"owner"}}'];
			for (const d of docs) {
				// An earlier version of each document, replaced by the later line.
				lines.push(line({ ...d, title: "an earlier version", obsolete: true }));
				// A document of an earlier version: its `ref` without the per-tenant key (the migration adds it).
				const { [TENANT_REF]: _key, ...legacy } = d;
				lines.push(line(name === "content/notes" && d.id === notes.b ? legacy : d, ["created_at", "updated_at"]));
			}
			lines.push(line({ _id: "removed-later", title: "gone" }), '{"$$deleted":true,"_id":"removed-later"}', '{"$$indexCreated":{"fieldName":"clients"}}');
			// A line cut short (a crash while appending), as NeDB tolerated a few.
			if (docs.length >= 10) lines.push('{"_id":"cut-sh');
			writeFileSync(file, `${lines.join("\n")}\n`);
		}
		// The outbox: two records, one of them passed by every consumer group (its position in _stream_offsets).
		const [r1, r2] = records.slice(-2);
		writeFileSync(nedbFileOf(dataDir, "_outbox"), `${[line({ _id: "o1", ...r1, seq: 10 }), line({ _id: "o2", ...r2, seq: 20 })].join("\n")}\n`);
		writeFileSync(nedbFileOf(dataDir, "_stream_offsets"), `${line({ _id: "observer", seq: 10 })}\n`);
		events = 1;
	}, 180_000);

	afterAll(async () => {
		await p?.stop().catch(() => undefined);
		await t?.cleanup().catch(() => undefined);
		if (dataDir) rmSync(dataDir, { recursive: true, force: true });
	});

	test("the reader takes NeDB's format: later lines win, deletions remove, index lines and dates", async () => {
		const notesRead = await readNedbFile(nedbFileOf(dataDir, "content/notes"));
		expect(notesRead.map((d) => d.id).sort()).toEqual([...before["content/notes"].map((d) => d.id)].sort());
		const b = notesRead.find((d) => d.id === notes.b)!;
		// As the platform stores documents: the id as `id`, NeDB's `_id` gone.
		expect(notesRead.filter((d) => "_id" in d)).toEqual([]);
		expect(b.title).toBe("note of b");
		expect(b.obsolete).toBeUndefined();
		expect(b.created_at).toBe(before["content/notes"].find((d) => d.id === notes.b)!.created_at);
		expect(b[TENANT_REF]).toBeUndefined();
		// More than a tenth of the lines corrupt: refused, as NeDB refused to load such a file.
		const bad = path.join(tempDir("nedb-bad-"), "x.db");
		writeFileSync(bad, `${line({ _id: "a" })}\nnot json\n`);
		await expect(readNedbFile(bad)).rejects.toThrow(`${bad}: 1 of 2 lines are not NeDB documents (more than NeDB's own 10 %); nothing copied from it`);
	});

	test("the platform refuses to start on it, naming the command; DOCUMENT_STORE=nedb and MONGO_URI answer a clear error", async () => {
		expect(nedbDocumentStores(dataDir)).toEqual(expect.arrayContaining(["identity/users", "domain/clients", "auth/grants", "content/notes", "_seed"]));
		const start = await run("start.ts", dataDir);
		expect(start.code).toBe(1);
		expect(start.out).toContain(unmigratedDataDir(dataDir)!);
		const nedb = await run("start.ts", dataDir, { DOCUMENT_STORE: "nedb" });
		expect(nedb.code).toBe(1);
		expect(nedb.out).toContain("DOCUMENT_STORE=nedb: the NeDB store is not offered any more");
		const mongo = await run("start.ts", dataDir, { MONGO_URI: "mongodb://127.0.0.1:1/x" });
		expect(mongo.code).toBe(1);
		expect(mongo.out).toContain("MONGO_URI is set: the MongoDB store is not offered any more");
		// Nothing of the directory was touched: no embedded PostgreSQL, the files in place.
		expect(existsSync(path.join(dataDir, "postgres"))).toBe(false);
	}, 120_000);

	test("migrate-store copies every document; the directory starts with every tenant, document and login", async () => {
		const m = await run("migrate-store.ts", dataDir);
		expect(m.out).toContain("Done. The NeDB files are kept in");
		expect(m.code).toBe(0);
		expect(m.out).toContain(`content/notes: ${before["content/notes"].length} copied, 0 already there`);
		expect(m.out).toContain(`change events not yet handled by every consumer group: ${events} in PostgreSQL's outbox`);
		// Counts only: no document content, no secret in the output.
		expect(m.out).not.toContain(t.a.member.password);
		expect(m.out).not.toMatch(/\$argon2|\$2[aby]\$/);
		expect(nedbDocumentStores(dataDir)).toEqual([]);
		expect(readdirSync(path.join(dataDir, "nedb-migrated"))).toEqual(expect.arrayContaining(["content", "identity", "_seed.db", "_outbox.db"]));

		p = await bootPlatform({ dataDir });
		// Every document of every store, as the platform had stored it (the dates and the per-tenant key included), beside
		// what the running platform has added since; the statistics apart, which the observer moves on as it counts the
		// carried event again (at least once), and the consumer positions, which start afresh.
		for (const [name, docs] of Object.entries(before).filter(([n]) => !["special/stats", "_stream_offsets", "_relay_offsets"].includes(n))) {
			const s = createStore(p.cfg, name);
			await s.connect();
			const got = await s.find({ query: {}, sort: { id: 1 } });
			await s.disconnect();
			expect({ name, docs: got }).toEqual({ name, docs: expect.arrayContaining(docs) });
		}
		expect((await sharedOutbox(p.cfg).readFrom(0, 1000)).some((r) => r.seq > 0)).toBe(true);
		// Root, the tenants' users (passwords) and clients (secrets) log in with what they had.
		await p.rootToken();
		const login = async (x: typeof t.a, username: string, password: string) =>
			(await ok(p!.http("POST", "/auth/token", { body: { grant_type: "password", client_id: x.client.id, username, password } }), `login ${username}`)).data.access_token as string;
		expect((await p.http("POST", "/auth/token", { body: { grant_type: "client_credential", client_id: t.b.client.id, client_secret: t.b.client.secret } })).status).toBe(200);
		const aMember = await login(t.a, "member", t.a.member.password);
		const bMember = await login(t.b, "member", t.b.member.password);
		expect((await p.http("POST", "/auth/token", { body: { grant_type: "password", client_id: t.a.client.id, username: "member", password: t.b.member.password } })).status).toBe(
			401,
		);
		// Tenancy intact: each member sees its own tenant's note, not the other's.
		const aList = (await ok(p.http("GET", "/content/notes", { token: aMember }), "list a")).items.map((d: StoredDoc) => d.id);
		expect(aList).toEqual([notes.a]);
		expect((await p.http("GET", `/content/notes/${notes.a}`, { token: bMember })).status).toBe(404);
		expect((await ok(p.http("GET", `/content/notes/${notes.b}`, { token: bMember }), "b's note")).data.title).toBe("note of b");
		// The key the migration gave b's note keeps its ref unique within the tenant.
		expect((await p.http("POST", "/content/notes", { token: bMember, body: { title: "again", ref: "ref-b" } })).status).toBe(409);
		expect((await p.http("POST", "/content/notes", { token: aMember, body: { title: "a's own", ref: "ref-b" } })).status).toBe(200);
		// The soft-deleted note is still deleted, and its tenant's admin restores it.
		const aAdmin = await login(t.a, t.a.admin.username, t.a.admin.password);
		expect((await p.http("GET", `/content/notes/${notes.deleted}`, { token: aAdmin })).status).toBe(404);
		expect((await p.http("PUT", `/content/notes/${notes.deleted}/restore`, { token: aAdmin })).status).toBe(200);
		expect((await ok(p.http("GET", `/content/notes/${notes.deleted}`, { token: aAdmin }), "restored")).data.title).toBe("deleted");
	}, 240_000);

	test("a second run copies nothing and says so", async () => {
		await p?.stop();
		p = undefined;
		const again = await run("migrate-store.ts", dataDir);
		expect(again.code).toBe(0);
		expect(again.out).toContain(`DATA_DIR ${dataDir} holds no NeDB documents: nothing to migrate`);
		expect(readFileSync(path.join(dataDir, "bootstrap.json"), "utf8")).toContain(t.p.root.client_id);
	}, 60_000);
});
