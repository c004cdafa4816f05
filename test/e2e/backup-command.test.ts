/**
 * Issue 33 item 4: `npm run backup -- <file>` and `npm run restore -- <file>` (data-backup.ts; docs/production.md,
 * "Backup and restore"), in the platform's own code (no pg_dump), for the embedded PostgreSQL and for DATABASE_URL.
 *
 *  - The embedded store, online: the backup reads through the running platform's server (its port and password in
 *    DATA_DIR) without taking DATA_DIR; the platform goes on serving. Restored into a new DATA_DIR (the command) and
 *    into a new database on the server (DATABASE_URL), a platform started on it has every document of every
 *    collection (read through the store, one by one), every outbox record, delivery, attempt and audit entry, the
 *    consumer positions, the file content and the keys: logins work with the same passwords, tokens issued before
 *    are valid, sealed values are read, and writing goes on after the last event (new positions above every restored
 *    one, the webhook gets the new change and none of the old ones again).
 *  - DATABASE_URL while 4 writers create notes: the backup is one snapshot (every note with its change event, every
 *    change event with its note), restored into a new embedded DATA_DIR.
 *  - Refusals: a target holding data, a DATA_DIR held by a platform, a file that is no backup or is cut short (nothing
 *    restored), a DATA_DIR of an earlier version's NeDB files; wrong arguments exit 2 with the usage.
 */
import { MIGRATIONS as DISPATCHER_MIGRATIONS } from "../../workers/dispatcher/store";
import { MIGRATIONS as LOGGER_MIGRATIONS } from "../../workers/logger/audit";
import { spawn } from "child_process";
import { createReadStream, createWriteStream, existsSync, readFileSync, rmSync, statSync, writeFileSync } from "fs";
import http from "http";
import path from "path";
import { PassThrough } from "stream";
import { once } from "events";
import { createGunzip, gzipSync, gunzipSync } from "zlib";
import { Client } from "pg";
import { bootPlatform, client, needServers, tempDir, type TestPlatform } from "../helpers/platform";
import { testDatabase, type TestDatabase } from "../helpers/pg";
import { bootTenancy, ok, type Tenancy } from "../helpers/tenants";
import { sleep, waitForValue } from "../helpers/wait";
import { createStore, PgStore, type StoredDoc } from "../../stores";
import { ident } from "../../stores/pg.store";
import { openRelational, releaseRelational, runningEmbedded } from "../../runtime/relational";
import { readConfig, type PlatformConfig } from "../../runtime/config";
import { textLines } from "../../runtime/lines";
import { projectSources } from "../layers";
import { BackupError, command, COMPONENTS, KEY_FILES, restoreBackup, writeBackup, type BackupHeader } from "../../data-backup";

/** The key files a backup of `dir` carries: those of KEY_FILES it holds, in that order. */
const keyFilesOf = (dir: string) => KEY_FILES.filter((f) => existsSync(path.join(dir, f)));
import { unmigratedDataDir } from "../../store-migration";
import { loadVapid } from "../../runtime/vapid";

const ROOT = path.resolve(__dirname, "../..");
const VERSION = (JSON.parse(readFileSync(path.join(ROOT, "package.json"), "utf8")) as { version: string }).version;
const servers = needServers(["PostgreSQL", 5432]);
jest.setTimeout(240_000);

/** `node --import tsx <script> <args>` with `env` (no DATABASE_URL unless given), its exit status and output. */
async function run(script: string, args: string[], env: Record<string, string>): Promise<{ code: number | null; out: string }> {
	const e: NodeJS.ProcessEnv = { ...process.env, LOG_LEVEL: "warn", DOCUMENT_STORE: "postgres", ...env };
	if (!env.DATABASE_URL) delete e.DATABASE_URL;
	const proc = spawn(process.execPath, ["--import", "tsx", script, ...args], { cwd: ROOT, env: e, stdio: ["ignore", "pipe", "pipe"] });
	let out = "";
	proc.stdout!.on("data", (c) => (out += c));
	proc.stderr!.on("data", (c) => (out += c));
	const [code] = (await once(proc, "exit")) as [number | null];
	return { code, out };
}

/** The lines of a backup file, parsed. */
async function backupLines(file: string): Promise<any[]> {
	const out: any[] = [];
	for await (const line of textLines(createReadStream(file).pipe(createGunzip()))) out.push(JSON.parse(line));
	return out;
}

/** The rows of one table in a backup's lines. */
function rowsOf(lines: any[], table: string): any[] {
	const start = lines.findIndex((l) => l["@"] === "table" && l.name === table);
	const end = lines.findIndex((l, i) => i > start && l["@"] === "end");
	return lines.slice(start + 1, end);
}

interface Contents {
	/**
	 * Every document of every collection's store that holds one, by store, in id order (a store's table is made when
	 * its first user connects: an empty one may come at any time).
	 */
	docs: Record<string, StoredDoc[]>;
	/** Every row of every other table of the platform (outbox, deliveries, attempts, births, audit), as JSON text. */
	rows: Record<string, string[]>;
	/** Sequences: their next value would be above this. */
	sequences: Record<string, number>;
}

/** Everything the platform on `cfg` stores, documents read through the store. */
async function contents(cfg: Pick<PlatformConfig, "dataDir" | "databaseUrl">): Promise<Contents> {
	const db = await openRelational(cfg);
	try {
		const out: Contents = { docs: {}, rows: {}, sequences: {} };
		const { rows } = await db.query<{ name: string; kind: string }>(
			"select relname as name, relkind::text as kind from pg_class where relkind in ('r', 'S') and relnamespace = to_regnamespace(current_schema()) order by 1",
		);
		for (const { name, kind } of rows) {
			if (kind === "S") out.sequences[name] = Number((await db.query<{ v: string }>(`select last_value as v from "${name}"`)).rows[0].v);
			else if (name.startsWith("docs/")) {
				const store = createStore(cfg, name.slice(5));
				await store.connect();
				const docs = await store.find({ query: {}, sort: { id: 1 } });
				await store.disconnect();
				if (docs.length) out.docs[name.slice(5)] = docs;
			} else if (name !== "schema_migrations") out.rows[name] = (await db.query<{ j: string }>(`select to_json(t)::text as j from "${name}" t order by 1`)).rows.map((r) => r.j);
		}
		return out;
	} finally {
		await releaseRelational(cfg);
	}
}

/** A webhook receiver on 127.0.0.1 that answers 200 and records every change event it gets. */
class Receiver {
	events: Array<{ id: string; op: string; webhookId: string }> = [];
	private server = http.createServer((req, res) => {
		let text = "";
		req.on("data", (c) => (text += c));
		req.on("end", () => {
			const body = JSON.parse(text);
			this.events.push({ id: body.id, op: body.op, webhookId: String(req.headers["webhook-id"]) });
			res.writeHead(200).end("ok");
		});
	});
	url = "";
	async start() {
		this.server.listen(0, "127.0.0.1");
		await once(this.server, "listening");
		this.url = `http://127.0.0.1:${(this.server.address() as { port: number }).port}/hook`;
	}
	stop() {
		this.server.closeAllConnections();
		return new Promise<void>((resolve) => this.server.close(() => resolve()));
	}
}

/** Waits until two readings of `cfg`'s contents 600 ms apart are the same (the workers are done), and returns it. */
async function quiet(cfg: PlatformConfig): Promise<Contents> {
	let last = await contents(cfg);
	for (const until = Date.now() + 30_000; ;) {
		await sleep(600);
		const now = await contents(cfg);
		if (JSON.stringify(now) === JSON.stringify(last)) return now;
		if (Date.now() > until) throw new Error("the platform did not go quiet within 30 s");
		last = now;
	}
}

/** The largest outbox position and consumer position of `c`. */
function positions(c: Contents): { outbox: number; consumers: number } {
	const outbox = Math.max(0, ...c.rows._outbox.map((r) => Number(JSON.parse(r).seq)));
	const consumers = Math.max(0, ...["_stream_offsets", "_relay_offsets"].flatMap((s) => (c.docs[s] ?? []).map((d) => Number(d.seq ?? 0))));
	return { outbox, consumers };
}

describe("the embedded store: backed up while it runs, restored into a new DATA_DIR and a new database", () => {
	let t: Tenancy;
	const rx = new Receiver();
	const dir = tempDir("backup-cmd-");
	const file = path.join(dir, "platform.backup");
	let before: Contents;
	const sequences: Record<string, number> = {};
	const notes: Record<string, string> = {};
	const blob = Buffer.from(`file content ${"x".repeat(70_000)} end`);
	let fileId: string;
	let oldToken: string;
	let restored: TestPlatform | undefined;
	let onServer: TestPlatform | undefined;
	let db: TestDatabase | undefined;

	beforeAll(async () => {
		await rx.start();
		t = await bootTenancy({ databaseUrl: undefined, webhookAllowPrivate: true });
		expect(t.p.cfg.databaseUrl).toBeUndefined();
		// The push keys, made now as the publisher's first health check or push would make them (at a time of its own):
		// every key file is then in DATA_DIR before the backup starts.
		loadVapid(t.p.cfg);
		// The outbox keeps every event (a group that never moves): the backup then holds them all.
		const hold = createStore(t.p.cfg, "_stream_offsets");
		await hold.connect();
		await hold.insert({ id: "test-hold", seq: 0 });
		await hold.disconnect();
		// A webhook (sealed credentials) that gets the changes: deliveries, attempts, a config birth.
		await ok(
			t.as(t.root, "POST", "/context/configs", { key: "CQRS", eid: t.p.root.client_id, value: { webhook: rx.url, authorization: "Bearer hook-secret", secret: "whsec_c2VjcmV0" } }),
			"webhook",
		);
		for (const x of [t.a, t.b]) {
			notes[x.name] = (await ok(t.as(x.member.token, "POST", "/content/notes", { title: `note of ${x.name}` }), "note")).data.id;
			await ok(t.as(x.admin.token, "POST", "/content/posts", { title: `post of ${x.name}` }), "post");
			await ok(t.as(x.admin.token, "POST", "/content/tickets", { title: `ticket of ${x.name}` }), "ticket");
		}
		notes.deleted = (await ok(t.as(t.a.admin.token, "POST", "/content/notes", { title: "deleted" }), "note")).data.id;
		await ok(t.as(t.a.admin.token, "DELETE", `/content/notes/${notes.deleted}`), "delete");
		notes.root = (await ok(t.as(t.root, "POST", "/content/notes", { title: "root's" }), "root note")).data.id;
		const fd = new FormData();
		fd.append("file", new Blob([blob], { type: "text/plain" }), "kept.txt");
		const up = await fetch(`${t.p.url}/special/files/upload`, { method: "POST", body: fd, headers: { authorization: `Bearer ${t.root}` } });
		expect(up.status).toBe(200);
		fileId = ((await up.json()) as { items: Array<{ id: string }> }).items[0].id;
		await waitForValue("the root note's delivery", async () => rx.events.some((e) => e.id === notes.root));
		oldToken = t.a.member.token;
		before = await quiet(t.p.cfg);
		db = await testDatabase();
	}, 240_000);

	afterAll(async () => {
		await restored?.cleanup();
		await onServer?.cleanup();
		await t?.cleanup();
		await db?.drop();
		await rx.stop();
		rmSync(dir, { recursive: true, force: true });
	});

	test("npm run backup while the platform runs: a 0600 file of every table, read through its server, DATA_DIR left to it", async () => {
		expect(before.rows.deliveries.length).toBeGreaterThan(0);
		expect(before.rows.delivery_attempts.length).toBeGreaterThan(0);
		expect(before.rows.config_births).toHaveLength(1);
		expect(before.rows.audit_entries.length).toBeGreaterThan(0);
		expect(before.rows._outbox.length).toBeGreaterThan(10);

		const r = await run("backup.ts", [file], { DATA_DIR: t.p.dataDir });
		expect(r.code).toBe(0);
		expect(r.out).toContain(`DATA_DIR ${t.p.dataDir} is in use by pid ${process.pid}: reading through its embedded PostgreSQL`);
		expect(r.out).toMatch(
			new RegExp(
				`Backup written to ${file} in [\\d.]+ s: \\d+ tables, \\d+ rows, 1 files of content \\(${blob.length} bytes\\), key files: keys.json, (vapid.json, )?bootstrap.json\\.`,
			),
		);
		expect(r.out).not.toContain("is not the platform's");
		expect(r.out).not.toContain(t.a.member.password);
		expect(statSync(file).mode & 0o777).toBe(0o600);
		// The collections' stores, the internal ones among them (consumer positions, the seed's claim, MQTT sessions).
		expect(Object.keys(before.docs)).toEqual(
			expect.arrayContaining([
				"identity/users",
				"identity/sessions",
				"domain/clients",
				"auth/grants",
				"content/notes",
				"context/configs",
				"special/files",
				"_stream_offsets",
				"_seed",
				"_mqtt_clients",
			]),
		);
		expect(existsSync(`${file}.partial-${process.pid}`)).toBe(false);
		// The platform was not disturbed: nothing written, and it still holds DATA_DIR and answers.
		const still = await contents(t.p.cfg);
		expect({ docs: still.docs, rows: still.rows }).toEqual({ docs: before.docs, rows: before.rows });
		expect((await t.as(t.a.member.token, "GET", `/content/notes/${notes.a}`)).status).toBe(200);

		const lines = await backupLines(file);
		for (const l of lines) if (l["@"] === "sequence") sequences[l.name] = Number(l.last_value);
		expect(Object.keys(sequences).sort()).toEqual(Object.keys(before.sequences).sort());
		const header = lines[0] as BackupHeader;
		expect(header).toMatchObject({
			"@": "platform-backup",
			version: 1,
			platform: VERSION,
			source: "embedded-postgres",
			schema: { dispatcher: DISPATCHER_MIGRATIONS.length, logger: LOGGER_MIGRATIONS.length },
		});
		expect(header.server).toMatch(/^18\./);
		// Every table of the platform, none other; the collections' tables not read above are empty.
		const names = header.tables.map((x) => x.name);
		expect(names.filter((n) => !n.startsWith("docs/"))).toEqual(["_outbox", "deliveries", "delivery_attempts", "config_births", "audit_entries"]);
		expect(names).toEqual(expect.arrayContaining([...Object.keys(before.docs).map((s) => `docs/${s}`), ...Object.keys(before.rows)]));
		for (const n of names.filter((x) => x.startsWith("docs/") && !before.docs[x.slice(5)])) expect({ n, rows: rowsOf(lines, n) }).toEqual({ n, rows: [] });
		expect(Object.keys(before.rows).sort()).toEqual(["_outbox", "audit_entries", "config_births", "deliveries", "delivery_attempts"]);
		expect(lines.at(-1)).toEqual({ "@": "complete", tables: header.tables.length, rows: expect.any(Number), sequences: 4, blobs: 1, files: keyFilesOf(t.p.dataDir).length });
		expect(
			rowsOf(lines, "docs/content/notes")
				.map((x) => x.id)
				.sort(),
		).toEqual(before.docs["content/notes"].map((d) => d.id).sort());
		// The key files DATA_DIR holds (vapid.json once the push keys were made).
		expect(lines.filter((l) => l["@"] === "file").map((l) => l.name)).toEqual(keyFilesOf(t.p.dataDir));
		expect(lines.find((l) => l["@"] === "file" && l.name === "keys.json").content).toBe(readFileSync(path.join(t.p.dataDir, "keys.json"), "utf8"));
	});

	/** Everything `p` stores is `before`, and it works as the source did: logins, old tokens, sealed values, files; writing goes on. */
	async function sameAsBefore(p: TestPlatform, sentBefore: number): Promise<void> {
		const now = await contents(p.cfg);
		// The platform's MQTT publisher claims a client id of its own at each start: the restored ones are all there.
		const publishers = now.docs._mqtt_clients.filter((d) => !before.docs._mqtt_clients.some((b) => b.id === d.id));
		expect(publishers.map((d) => d.identity)).toEqual(["$publisher"]);
		now.docs._mqtt_clients = now.docs._mqtt_clients.filter((d) => !publishers.includes(d));
		// Each consumer group stores its position again when it starts: the same position, a new time.
		const positionsOf = (docs: StoredDoc[]) => docs.map(({ at, ...d }) => d);
		expect(positionsOf(now.docs._stream_offsets)).toEqual(positionsOf(before.docs._stream_offsets));
		for (const store of Object.keys(before.docs).filter((n) => n !== "_stream_offsets")) expect({ store, docs: now.docs[store] }).toEqual({ store, docs: before.docs[store] });
		expect(Object.keys(now.docs).sort()).toEqual(Object.keys(before.docs).sort());
		expect(now.rows).toEqual(before.rows);
		// Each sequence as the backup read it (after its rows): above every restored row's.
		for (const [name, v] of Object.entries(sequences)) expect({ name, v: now.sequences[name] }).toEqual({ name, v });

		const http = client(p.url);
		const login = (x: typeof t.a, who: "member" | "admin") =>
			http("POST", "/auth/token", { body: { grant_type: "password", client_id: x.client.id, username: x[who].username, password: x[who].password } });
		expect((await login(t.a, "member")).status).toBe(200);
		const bAdmin = (await login(t.b, "admin")).body.data.access_token;
		const wrong = await http("POST", "/auth/token", { body: { grant_type: "password", client_id: t.a.client.id, username: "member", password: t.b.member.password } });
		expect(wrong.status).toBe(401);
		// A token of the source is valid here (the same JWT secret), and tenancy holds.
		expect((await http("GET", `/content/notes/${notes.a}`, { token: oldToken })).body.data.title).toBe("note of a");
		expect((await http("GET", `/content/notes/${notes.b}`, { token: oldToken })).status).toBe(404);
		expect((await http("GET", `/content/notes/${notes.deleted}`, { token: bAdmin })).status).toBe(404);
		const root = await p.rootToken();
		const download = await fetch(`${p.url}/special/files/${fileId}/download`, { headers: { authorization: `Bearer ${root}` } });
		expect(download.status).toBe(200);
		expect(Buffer.from(await download.arrayBuffer()).equals(blob)).toBe(true);

		// Writing goes on after the last event: a new position above every restored one, delivered to the webhook
		// (its sealed credentials read with the restored AES key), and no old change delivered again.
		const { outbox, consumers } = positions(before);
		const delivered = rx.events.length;
		const old = new Set(rx.events.slice(0, sentBefore).map((e) => e.webhookId));
		const created = (await ok(http("POST", "/content/notes", { token: root, body: { title: "after the restore" } }), "create")).data.id;
		const got = await waitForValue("the new note's delivery", async () => rx.events.slice(delivered).find((e) => e.id === created));
		expect(got.op).toBe("c");
		const after = await contents(p.cfg);
		const seq = after.rows._outbox.map((r) => JSON.parse(r)).find((r) => r.rec.event.id === created).seq;
		expect(seq).toBeGreaterThan(Math.max(outbox, consumers));
		// Every delivery since the start is new (the root's login above made a session: its change is delivered too).
		await sleep(1000);
		expect(rx.events.slice(sentBefore).filter((e) => old.has(e.webhookId))).toEqual([]);
	}

	test("npm run restore into a new DATA_DIR: the platform started on it has everything and goes on", async () => {
		const target = tempDir("backup-target-");
		const r = await run("restore.ts", [file], { DATA_DIR: target });
		expect(r.code).toBe(0);
		expect(r.out).toMatch(
			new RegExp(
				`Restored \\d+ tables, \\d+ rows, 1 files of content and key files keys.json, (vapid.json, )?bootstrap.json into DATA_DIR ${target} in [\\d.]+ s\\. Start the platform on it\\.`,
			),
		);
		for (const f of ["keys.json", "bootstrap.json"]) {
			expect(readFileSync(path.join(target, f), "utf8")).toBe(JSON.stringify(JSON.parse(readFileSync(path.join(t.p.dataDir, f), "utf8")), null, 2));
			expect(statSync(path.join(target, f)).mode & 0o777).toBe(0o600);
		}
		const sent = rx.events.length;
		restored = await bootPlatform({ dataDir: target, databaseUrl: undefined, webhookAllowPrivate: true });
		await sameAsBefore(restored, sent);
	});

	test("a restore into a DATA_DIR in use, or holding data, is refused and changes nothing", async () => {
		const target = restored!.dataDir;
		const busy = await run("restore.ts", [file], { DATA_DIR: target });
		expect(busy.code).toBe(1);
		expect(busy.out).toContain(`restore failed: DATA_DIR ${target} is in use by pid ${process.pid}`);
		await restored!.stop();
		const full = await run("restore.ts", [file], { DATA_DIR: target });
		expect(full.code).toBe(1);
		expect(full.out).toMatch(new RegExp(`restore failed: DATA_DIR ${target} already holds data \\(.+\\): restore into an empty DATA_DIR or database`));
		// With no platform on it, a backup of that DATA_DIR starts its server, holds DATA_DIR meanwhile, and gives both back.
		const offline = await run("backup.ts", [path.join(dir, "offline.backup")], { DATA_DIR: target });
		expect(offline.code).toBe(0);
		expect(offline.out).toContain(`No platform runs on DATA_DIR ${target}: starting its embedded PostgreSQL for the backup (a platform started meanwhile is refused)`);
		const lines = await backupLines(path.join(dir, "offline.backup"));
		expect(rowsOf(lines, "docs/content/notes")).toHaveLength(before.docs["content/notes"].length + 1);
		expect(lines.at(-1)["@"]).toBe("complete");
		expect(runningEmbedded(target)).toBeUndefined();
		expect(existsSync(path.join(target, "platform.lock"))).toBe(false);
		// Another DATA_DIR's keys are never replaced.
		const other = tempDir("backup-other-");
		writeFileSync(path.join(other, "keys.json"), JSON.stringify({ jwtSecret: "j", aesSecret: "a" }));
		const keys = await run("restore.ts", [file], { DATA_DIR: other });
		expect(keys.code).toBe(1);
		expect(keys.out).toContain(`restore failed: DATA_DIR ${other} already holds keys.json, not the backup's: restore into an empty DATA_DIR (nothing restored)`);
		expect(existsSync(path.join(other, "postgres"))).toBe(false);
		rmSync(other, { recursive: true, force: true });
	});

	servers.test("restore into a new database (DATABASE_URL) with a new DATA_DIR: the platform started on it has everything and goes on", async () => {
		const target = tempDir("backup-db-");
		const cfg = { ...readConfig(), dataDir: target, databaseUrl: db!.url };
		const logged: string[] = [];
		const s = await restoreBackup(cfg, createReadStream(file), (l) => logged.push(l));
		expect(s.header.source).toBe("embedded-postgres");
		expect(s.files).toEqual(keyFilesOf(t.p.dataDir));
		expect(s.blobs).toBe(1);
		expect(logged[0]).toMatch(/^Restoring the backup of .* \(platform [\d.]+, embedded-postgres, PostgreSQL 18\.[\d.]+\): \d+ tables$/);
		const sent = rx.events.length;
		onServer = await bootPlatform({ dataDir: target, databaseUrl: db!.url, webhookAllowPrivate: true });
		await sameAsBefore(onServer, sent);
		// The server's database holds data now: a second restore is refused.
		await expect(restoreBackup({ ...cfg, dataDir: path.join(dir, "second") }, createReadStream(file))).rejects.toThrow(
			/^the database at DATABASE_URL already holds data \([^,]+, [^,]+, [^,]+, and \d+ more tables\): restore into an empty DATA_DIR or database$/,
		);
	});
});

servers.describe("DATABASE_URL: backed up while four writers create notes, restored into a new embedded DATA_DIR", () => {
	let source: TestPlatform;
	let restored: TestPlatform | undefined;
	let dir: string;
	let file: string;

	beforeAll(async () => {
		dir = tempDir("backup-url-");
		file = path.join(dir, "url.backup");
		source = await bootPlatform({});
		if (!source.cfg.databaseUrl) throw new Error("expected a database on the local server");
		const hold = createStore(source.cfg, "_stream_offsets");
		await hold.connect();
		await hold.insert({ id: "test-hold", seq: 0 });
		await hold.disconnect();
	}, 120_000);
	afterAll(async () => {
		await restored?.cleanup();
		await source?.cleanup();
		if (dir) rmSync(dir, { recursive: true, force: true });
	});

	test("one snapshot: every note with its change event and every change event with its note; a platform starts on it and goes on", async () => {
		const token = await source.rootToken();
		const count = async () => (await ok(source.http("GET", "/content/notes?pagination=%7B%22limit%22%3A1%7D", { token }), "count")).total as number;
		let stop = false;
		let written = 0;
		const writer = async (w: number) => {
			for (let i = 0; !stop; i++) {
				await ok(source.http("POST", "/content/notes", { token, body: { title: `w${w}-${i}` } }), "write");
				written++;
			}
		};
		const writers = [0, 1, 2, 3].map(writer);
		await waitForValue("the writers to start", async () => written >= 8);
		const atStart = await count();
		const out = createWriteStream(file, { mode: 0o600 });
		const s = await writeBackup({ ...source.cfg }, out, () => undefined);
		const atEnd = await count();
		stop = true;
		await Promise.all(writers);
		expect(s.warnings).toEqual([]);

		const lines = await backupLines(file);
		expect(lines[0].source).toBe("postgres");
		const noteIds = rowsOf(lines, "docs/content/notes").map((x) => x.id);
		const created = rowsOf(lines, "_outbox")
			.filter((r) => r.rec.event.topic === "content.notes" && r.rec.event.op === "c")
			.map((r) => r.rec.event.id);
		expect(noteIds.length).toBeGreaterThanOrEqual(atStart);
		expect(noteIds.length).toBeLessThanOrEqual(atEnd);
		expect(atEnd).toBeGreaterThan(atStart);
		expect(created.sort()).toEqual(noteIds.sort());
		const lastSeq = Math.max(...rowsOf(lines, "_outbox").map((r) => Number(r.seq)));
		expect(Number(lines.find((l) => l["@"] === "sequence" && l.name === "_outbox_seq").last_value)).toBeGreaterThanOrEqual(lastSeq);

		const target = tempDir("backup-url-target-");
		await restoreBackup({ ...readConfig(), dataDir: target, databaseUrl: undefined }, createReadStream(file));
		restored = await bootPlatform({ dataDir: target, databaseUrl: undefined });
		const root = await restored.rootToken();
		expect((await contents(restored.cfg)).docs["content/notes"].map((d) => d.id).sort()).toEqual(noteIds.sort());
		expect((await restored.http("GET", "/content/notes?pagination=%7B%22limit%22%3A1%7D", { token: root })).body.total).toBe(noteIds.length);
		const next = (await ok(restored.http("POST", "/content/notes", { token: root, body: { title: "after" } }), "after")).data.id;
		const c = await contents(restored.cfg);
		expect(c.rows._outbox.map((r) => JSON.parse(r)).find((r) => r.rec.event.id === next).seq).toBeGreaterThan(lastSeq);
	});
});

describe("refusals and usage", () => {
	const dir = tempDir("backup-usage-");
	afterAll(() => rmSync(dir, { recursive: true, force: true }));

	/** `command` in process: its exit status and what it wrote to standard error. */
	async function cli(kind: "backup" | "restore", args: string[], env: Record<string, string | undefined> = {}): Promise<{ code: number; err: string }> {
		const saved = { ...process.env };
		Object.assign(process.env, { DOCUMENT_STORE: "postgres" }, env);
		for (const [k, v] of Object.entries(env)) if (v === undefined) delete process.env[k];
		let err = "";
		const write = jest.spyOn(process.stderr, "write").mockImplementation((c: string | Uint8Array) => ((err += String(c)), true));
		try {
			return { code: await command(kind, args), err };
		} finally {
			write.mockRestore();
			process.env = saved;
		}
	}

	test("wrong arguments exit 2 with the usage; --help exits 0", async () => {
		expect(await cli("backup", [])).toEqual({
			code: 2,
			err: "backup: which file?\nusage: npm run backup -- <file>   (or - for standard output; DATA_DIR or DATABASE_URL as the platform's)\n",
		});
		expect(await cli("restore", ["a", "b"])).toEqual({
			code: 2,
			err: 'restore: expected one file, got "a" "b"\nusage: npm run restore -- <file>  (or - for standard input; into an empty DATA_DIR or DATABASE_URL)\n',
		});
		expect((await cli("backup", ["--force"])).code).toBe(2);
		const write = jest.spyOn(process.stdout, "write").mockImplementation(() => true);
		expect((await cli("restore", ["--help"])).code).toBe(0);
		write.mockRestore();
	});

	test("a missing file, a file that is no backup, a backup cut short: exit 1, nothing restored", async () => {
		const target = path.join(dir, "target");
		expect(await cli("restore", [path.join(dir, "none.backup")], { DATA_DIR: target, DATABASE_URL: undefined })).toEqual({
			code: 1,
			err: `restore failed: cannot read ${path.join(dir, "none.backup")}: ENOENT\n`,
		});
		writeFileSync(path.join(dir, "text.backup"), "hello\n");
		const text = await cli("restore", [path.join(dir, "text.backup")], { DATA_DIR: target, DATABASE_URL: undefined });
		expect(text.code).toBe(1);
		expect(text.err).toMatch(/^restore failed: not a platform backup/);
		writeFileSync(path.join(dir, "json.backup"), gzipSync('{"hello":1}\n'));
		expect(await cli("restore", [path.join(dir, "json.backup")], { DATA_DIR: target, DATABASE_URL: undefined })).toEqual({
			code: 1,
			err: "restore failed: not a platform backup (its first line is no platform-backup header)\n",
		});
		expect(existsSync(target)).toBe(false);
	});

	servers.test("a backup cut short restores nothing: the database stays empty and takes the whole backup afterwards", async () => {
		const db = await testDatabase();
		const source = await bootPlatform({});
		try {
			const whole = path.join(dir, "whole.backup");
			await writeBackup({ ...source.cfg }, createWriteStream(whole), () => undefined);
			const lines = gunzipSync(readFileSync(whole)).toString("utf8").split("\n");
			const cut = path.join(dir, "cut.backup");
			// Every row there, only the last line missing.
			writeFileSync(cut, gzipSync(lines.filter((l) => !l.startsWith('{"@":"complete"')).join("\n")));
			const cfg = { ...readConfig(), dataDir: path.join(dir, "db-target"), databaseUrl: db!.url };
			await expect(restoreBackup(cfg, createReadStream(cut))).rejects.toThrow(new BackupError("the backup is cut short (no `complete` record): nothing restored"));
			const c = new Client({ connectionString: db!.url });
			await c.connect();
			const seeded = await c.query(`select count(*)::int as n from "docs/_seed"`);
			await c.end();
			expect(seeded.rows[0].n).toBe(0);
			expect(existsSync(path.join(cfg.dataDir, "keys.json"))).toBe(false);
			const s = await restoreBackup(cfg, createReadStream(whole));
			expect(s.tables["docs/_seed"]).toBe(1);
		} finally {
			await source.cleanup();
			await db?.drop();
		}
	});

	servers.test("a collection whose table name was shortened and that the platform does not list cannot be named: refused, not half backed up", async () => {
		const db = await testDatabase();
		const cfg = { ...readConfig(), dataDir: path.join(dir, "long"), databaseUrl: db!.url, mongoUri: undefined };
		const long = `content/${"x".repeat(60)}`;
		const store = new PgStore(cfg, long);
		try {
			await store.connect();
			await store.insert({ id: "a", title: "kept" });
			const table = ident(`docs/${long}`).slice(1, -1);
			expect(table).toMatch(/^docs\/content\/x+#[0-9a-f]{16}$/);
			await expect(writeBackup(cfg, new PassThrough())).rejects.toThrow(
				new BackupError(`table ${table} holds documents of a collection this version of the platform cannot name: back up with the version that made it`),
			);
		} finally {
			await store.disconnect();
			await db?.drop();
		}
	});

	test("a DATA_DIR of an earlier version's NeDB files, or without a store, is not what a backup covers", async () => {
		const cfg = readConfig();
		const legacy = tempDir("backup-nedb-");
		writeFileSync(path.join(legacy, "_seed.db"), `${JSON.stringify({ _id: "root", state: "done" })}\n`);
		await expect(writeBackup({ ...cfg, dataDir: legacy }, new PassThrough())).rejects.toThrow(new BackupError(unmigratedDataDir(legacy)!));
		await expect(restoreBackup({ ...cfg, dataDir: legacy, databaseUrl: undefined }, new PassThrough())).rejects.toThrow(new BackupError(unmigratedDataDir(legacy)!));
		rmSync(legacy, { recursive: true, force: true });
		await expect(writeBackup({ ...cfg, dataDir: path.join(dir, "empty"), databaseUrl: undefined }, new PassThrough())).rejects.toThrow(
			new BackupError(`DATA_DIR ${path.join(dir, "empty")} holds no embedded PostgreSQL: nothing to back up (set DATA_DIR to the platform's, or DATABASE_URL)`),
		);
	});

	test("every relational component's migrations are in the backup's registry", () => {
		const migrated = [...projectSources(ROOT).values()].flatMap((s) => [...s.matchAll(/\bmigrate\(\w+, "([^"]+)"/g)].map((m) => m[1]));
		expect(migrated.sort()).toEqual(COMPONENTS.map((c) => c.name).sort());
	});
});
