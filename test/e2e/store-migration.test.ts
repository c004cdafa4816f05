/**
 * Issue 22 item 1: PostgreSQL is the default document store, and an NeDB DATA_DIR of an earlier default keeps working:
 * with DOCUMENT_STORE unset it starts on NeDB and logs how to migrate; `npm run migrate-store` (refused while the
 * platform runs) copies every document into PostgreSQL, keeping ids, tenants, timestamps and hashed secrets, and the
 * directory then starts on PostgreSQL with every login intact.
 *
 * One store by design: the file starts on NeDB and ends on PostgreSQL (the way from one to the other is what it
 * tests), so PLATFORM_TEST_STORE and STORES do not apply.
 */
import { spawn } from "child_process";
import { existsSync, readFileSync, rmSync } from "fs";
import path from "path";
import { freePort } from "../helpers/child";
import { bootPlatform, client, type TestPlatform } from "../helpers/platform";
import { bootTenancy, ok, type Tenancy } from "../helpers/tenants";
import { NedbStore, createStore, type StoredDoc } from "../../mixins/stores";
import { nedbDocumentStores, nedbFileOf } from "../../runtime/nedb-data";
import { sleep } from "../helpers/wait";

const ROOT = path.resolve(__dirname, "../..");
const NOTICE = "holds NeDB documents: starting on NeDB";

interface Run {
	code: number | null;
	out: string;
}

/** `node --import tsx <script>` with DATA_DIR and no DOCUMENT_STORE (the default), its output (stdout and stderr). */
function run(script: string, dataDir: string, extra: Record<string, string> = {}) {
	const env: NodeJS.ProcessEnv = { ...process.env, DATA_DIR: dataDir, LOG_LEVEL: "warn", HOST: "127.0.0.1", MQTT_PORT: "0", ...extra };
	delete env.DOCUMENT_STORE;
	delete env.DATABASE_URL;
	const proc = spawn(process.execPath, ["--import", "tsx", script], { cwd: ROOT, env, stdio: ["ignore", "pipe", "pipe"] });
	const r: Run = { code: null, out: "" };
	proc.stdout!.on("data", (c) => (r.out += c));
	proc.stderr!.on("data", (c) => (r.out += c));
	const exited = new Promise<Run>((resolve) => proc.once("exit", (code) => resolve(Object.assign(r, { code }))));
	return { proc, r, exited };
}

/** Every document of every NeDB store of `dir` (files under `dir`), by store name. */
async function nedbDocs(dir: string, names: string[]): Promise<Record<string, StoredDoc[]>> {
	const out: Record<string, StoredDoc[]> = {};
	for (const n of names) {
		const s = new NedbStore(nedbFileOf(dir, n));
		await s.connect();
		out[n] = await s.find({ query: {}, sort: { _id: 1 } });
		await s.disconnect();
	}
	return out;
}

describe("an NeDB DATA_DIR under the PostgreSQL default", () => {
	let t: Tenancy;
	let dataDir: string;
	let stores: string[];
	let before: Record<string, StoredDoc[]>;
	const notes: Record<string, string> = {};
	let pg: TestPlatform | undefined;

	beforeAll(async () => {
		t = await bootTenancy("nedb");
		dataDir = t.p.dataDir;
		for (const x of [t.a, t.b]) notes[x.name] = (await ok(t.as(x.member.token, "POST", "/content/notes", { title: `note of ${x.name}` }), "note")).data.id;
		const gone = (await ok(t.as(t.a.admin.token, "POST", "/content/notes", { title: "deleted" }), "note")).data.id;
		await ok(t.as(t.a.admin.token, "DELETE", `/content/notes/${gone}`), "delete");
		notes.deleted = gone;
		await t.p.stop();
		stores = nedbDocumentStores(dataDir);
		before = await nedbDocs(dataDir, stores);
	}, 120_000);

	afterAll(async () => {
		await pg?.cleanup();
		if (!pg && dataDir) rmSync(dataDir, { recursive: true, force: true });
	});

	test("starts on NeDB with the migration notice; migrate-store is refused while it runs, touching nothing", async () => {
		expect(stores).toEqual(expect.arrayContaining(["identity/users", "domain/clients", "auth/grants", "content/notes", "_seed"]));
		const port = await freePort();
		const platform = run("start.ts", dataDir, { PORT: String(port) });
		try {
			const url = `http://127.0.0.1:${port}`;
			for (let i = 0; ; i++) {
				if (platform.r.code !== null || i > 300) throw new Error(`platform did not start: ${platform.r.out}`);
				const s = await fetch(`${url}/status`).catch(() => undefined);
				if (s?.status === 200) {
					expect(((await s.json()) as { info: Record<string, unknown> }).info["document store"]).toEqual({ status: "up", kind: "nedb" });
					break;
				}
				await sleep(200);
			}
			expect(platform.r.out).toContain(`DATA_DIR ${dataDir} ${NOTICE}`);
			expect(platform.r.out).toContain("run `npm run migrate-store`");
			// The member of tenant a still logs in and reads its note, on NeDB.
			const http = client(url);
			const token = (await ok(http("POST", "/auth/token", { body: { grant_type: "password", client_id: t.a.client.id, username: "member", password: t.a.member.password } }), "login")).data.access_token;
			expect((await http("GET", `/content/notes/${notes.a}`, { token })).body.data.title).toBe("note of a");

			const refused = await run("migrate-store.ts", dataDir).exited;
			expect(refused.code).toBe(1);
			expect(refused.out).toContain(`DATA_DIR ${dataDir} is in use by pid ${platform.proc.pid}`);
			expect(nedbDocumentStores(dataDir)).toEqual(stores);
			expect(existsSync(path.join(dataDir, "nedb-migrated"))).toBe(false);
		} finally {
			platform.proc.kill("SIGTERM");
			await platform.exited;
		}
	}, 120_000);

	test("migrate-store copies every document; the directory starts on PostgreSQL with every tenant, document and login", async () => {
		// What the NeDB platform of the first test left (reading compacts: a store whose documents were all removed, the
		// audit spool once written through, is then an empty file, no store to copy).
		before = await nedbDocs(dataDir, nedbDocumentStores(dataDir));
		stores = nedbDocumentStores(dataDir);
		const m = await run("migrate-store.ts", dataDir).exited;
		expect(m.code).toBe(0);
		expect(m.out).toContain("content/notes: 3 copied, 0 already there");
		expect(m.out).toContain(`DATA_DIR ${dataDir} now starts on PostgreSQL`);
		// Counts only: no document content, no secret in the output.
		expect(m.out).not.toContain(t.a.member.password);
		expect(m.out).not.toMatch(/\$argon2|\$2[aby]\$/);
		expect(nedbDocumentStores(dataDir)).toEqual([]);
		expect(nedbDocumentStores(path.join(dataDir, "nedb-migrated"))).toEqual(stores);

		// Every document of every store, as stored: ids, tenants, owners, timestamps, deletions, hashed secrets.
		const on = { dataDir, mongoUri: undefined, documentStore: "postgres" as const };
		for (const name of stores.filter((n) => n !== "_outbox")) {
			const s = createStore(on, name);
			await s.connect();
			const docs = await s.find({ query: {}, sort: { _id: 1 } });
			await s.disconnect();
			expect({ name, docs }).toEqual({ name, docs: JSON.parse(JSON.stringify(before[name])) });
		}

		pg = await bootPlatform({ dataDir, documentStore: undefined });
		expect(pg.cfg.documentStore).toBe("postgres");
		expect((await pg.http("GET", "/status")).body.info["document store"]).toEqual({ status: "up", kind: "postgres" });
		// Root, the tenants' users (passwords) and clients (secrets) log in with what they had.
		await pg.rootToken(); // throws unless root logs in with the password of bootstrap.json
		const login = async (x: typeof t.a, username: string, password: string) =>
			(await ok(pg!.http("POST", "/auth/token", { body: { grant_type: "password", client_id: x.client.id, username, password } }), `login ${username}`)).data.access_token as string;
		const cc = await pg.http("POST", "/auth/token", { body: { grant_type: "client_credential", client_id: t.b.client.id, client_secret: t.b.client.secret } });
		expect(cc.status).toBe(200);
		const aMember = await login(t.a, "member", t.a.member.password);
		const bMember = await login(t.b, "member", t.b.member.password);
		const wrong = await pg.http("POST", "/auth/token", { body: { grant_type: "password", client_id: t.a.client.id, username: "member", password: t.b.member.password } });
		expect(wrong.status).toBe(401);
		// Tenancy intact: each member sees its own tenant's note, not the other's.
		const aList = (await ok(pg.http("GET", "/content/notes", { token: aMember }), "list a")).items.map((d: StoredDoc) => d.id);
		expect(aList).toContain(notes.a);
		expect(aList).not.toContain(notes.b);
		expect((await pg.http("GET", `/content/notes/${notes.a}`, { token: bMember })).status).toBe(404);
		// The soft-deleted note is still deleted, and its tenant's admin restores it.
		const aAdmin = await login(t.a, t.a.admin.username, t.a.admin.password);
		expect((await pg.http("GET", `/content/notes/${notes.deleted}`, { token: aAdmin })).status).toBe(404);
		expect((await pg.http("PUT", `/content/notes/${notes.deleted}/restore`, { token: aAdmin })).status).toBe(200);
		// Writes go on: a new note on PostgreSQL next to the copied ones.
		const created = await ok(pg.http("POST", "/content/notes", { token: aMember, body: { title: "after" } }), "create");
		expect((await ok(pg.http("GET", `/content/notes/${notes.deleted}`, { token: aAdmin }), "restored")).data.title).toBe("deleted");
		const mine = (await ok(pg.http("GET", "/content/notes", { token: aMember }), "member list")).items.map((d: StoredDoc) => d.id);
		expect(mine.sort()).toEqual([notes.a, created.data.id].sort());
	}, 180_000);

	test("a second run copies nothing and says so", async () => {
		await pg?.stop();
		pg = undefined;
		const again = await run("migrate-store.ts", dataDir).exited;
		expect(again.code).toBe(0);
		expect(again.out).toContain(`DATA_DIR ${dataDir} holds no NeDB documents: nothing to migrate`);
		expect(readFileSync(path.join(dataDir, "bootstrap.json"), "utf8")).toContain(t.p.root.client_id);
	}, 60_000);
});
