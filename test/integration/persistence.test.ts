/**
 * Durability across a restart on the same DATA_DIR: documents in every lifecycle state, the change-event outbox
 * (docs/contracts.md "Change events", spec "Change webhook"), secrets kept out of events, and root seeding done once.
 */
import { readFileSync, statSync } from "fs";
import path from "path";
import { sharedOutbox, type OutboxRecord } from "../../events/outbox";
import { bootPlatform, dataDirHoldingOutbox, type TestPlatform } from "../helpers/platform";
import { storedTexts } from "../helpers/stored";
import { sampleBody, unique } from "../helpers/samples";

const EXCLUDE = { "x-exclude-soft-delete-query": "1" };
const NOT_FOUND = { statusCode: 404, message: "document not found", error: "Not Found" };
const BCRYPT = /\$2[aby]\$\d\d\$/;
const EVENT_KEYS = ["after", "before", "id", "op", "source", "topic", "ts_ms"];

let p: TestPlatform;
let token: string;
const notes: Record<"patched" | "deleted" | "restored" | "destroyed" | "plain", Record<string, any>> = {} as any;
let patchedTitle: string;
let user: Record<string, any>;
let clientGenerated: Record<string, any>;
let clientGiven: Record<string, any>;
const plaintexts: string[] = [];
let bootstrapBefore: string;
let grantsBefore: number;
let outboxBefore: OutboxRecord[];
let startedAt: number;

async function readOutbox(): Promise<OutboxRecord[]> {
	const out: OutboxRecord[] = [];
	let pos = 0;
	for (;;) {
		const batch = await sharedOutbox(p.cfg).readFrom(pos, 1000);
		out.push(...batch);
		if (batch.length < 1000) return out;
		pos = batch[batch.length - 1].seq;
	}
}

async function call(method: string, url: string, opts: { body?: unknown; headers?: Record<string, string> } = {}) {
	const r = await p.http(method, url, { token, ...opts });
	expect(r.status).toBeLessThan(500);
	return r;
}

beforeAll(async () => {
	startedAt = Date.now();
	p = await bootPlatform({ dataDir: dataDirHoldingOutbox() });
	token = await p.rootToken();
	plaintexts.push(p.root.password, p.root.client_secret);

	const make = async (title: string) => {
		const r = await call("POST", "/content/notes", { body: { title, content: `content of ${title}` } });
		expect(r.status).toBe(200);
		return r.body.data;
	};
	notes.patched = await make("to patch");
	notes.deleted = await make("to delete");
	notes.restored = await make("to restore");
	notes.destroyed = await make("to destroy");
	notes.plain = await make("untouched");

	patchedTitle = `patched ${unique()}`;
	expect((await call("PATCH", `/content/notes/${notes.patched.id}`, { body: { title: patchedTitle } })).status).toBe(200);
	expect((await call("DELETE", `/content/notes/${notes.deleted.id}`)).status).toBe(200);
	expect((await call("DELETE", `/content/notes/${notes.restored.id}`)).status).toBe(200);
	expect((await call("PUT", `/content/notes/${notes.restored.id}/restore`)).status).toBe(200);
	expect((await call("DELETE", `/content/notes/${notes.destroyed.id}/destroy`)).status).toBe(200);

	// A user with a password, whose password then changes; a client with a generated and one with a given secret.
	const userBody = sampleBody("identity/users", 0);
	plaintexts.push(userBody.password as string);
	const u = await call("POST", "/identity/users", { body: userBody });
	expect(u.status).toBe(200);
	const newPassword = `Changed-pass-${unique()}`;
	plaintexts.push(newPassword);
	expect((await call("PATCH", `/identity/users/${u.body.data.id}`, { body: { password: newPassword } })).status).toBe(200);
	user = (await call("GET", `/identity/users/${u.body.data.id}`)).body.data;

	const c1 = await call("POST", "/domain/clients", { body: sampleBody("domain/clients", 0) });
	expect(c1.status).toBe(200);
	plaintexts.push(c1.body.data.secret);
	const given = `given-secret-${unique()}`;
	plaintexts.push(given);
	const c2 = await call("POST", "/domain/clients", { body: { ...sampleBody("domain/clients", 1), secret: given } });
	expect(c2.status).toBe(200);
	expect(c2.body.data.secret).toBe(given);
	clientGenerated = (await call("GET", `/domain/clients/${c1.body.data.id}`)).body.data;
	clientGiven = (await call("GET", `/domain/clients/${c2.body.data.id}`)).body.data;

	bootstrapBefore = readFileSync(path.join(p.dataDir, "bootstrap.json"), "utf8");
	grantsBefore = (await call("GET", "/auth/grants/count")).body.total;
	outboxBefore = await readOutbox();

	await p.restart();
}, 60_000);
afterAll(() => p?.cleanup());

describe("after a restart", () => {
	test("root seeding happened once: bootstrap.json unchanged, root logs in, nothing seeded twice", async () => {
		const file = path.join(p.dataDir, "bootstrap.json");
		expect(readFileSync(file, "utf8")).toBe(bootstrapBefore);
		expect(statSync(file).mode & 0o777).toBe(0o600);
		// The token of before the restart stays valid (keys are kept in DATA_DIR), and root logs in again.
		expect((await p.http("GET", "/auth/verify", { token })).status).toBe(200);
		token = await p.rootToken();
		expect((await call("GET", "/auth/grants/count")).body).toEqual({ total: grantsBefore });
		expect((await call("GET", `/identity/users/count?query=${encodeURIComponent(JSON.stringify({ username: p.root.username }))}`)).body).toEqual({ total: 1 });
		expect((await call("GET", `/domain/clients/${p.root.client_id}`)).body.data).toMatchObject({ id: p.root.client_id, name: "root", scopes: ["whole"] });
		const after = await readOutbox();
		const seedEvents = (list: OutboxRecord[]) => list.filter((r) => r.event.topic === "auth.grants" && r.event.op === "c").length;
		expect(seedEvents(after)).toBe(seedEvents(outboxBefore));
		expect(seedEvents(after)).toBe(grantsBefore);
	});

	test("documents are there in the state they were left in", async () => {
		const get = (id: string, headers?: Record<string, string>) => call("GET", `/content/notes/${id}`, { headers });
		const patched = await get(notes.patched.id);
		expect(patched.body.data).toMatchObject({ id: notes.patched.id, title: patchedTitle, deleted_at: null });
		expect((await get(notes.plain.id)).body).toEqual({ data: notes.plain });

		expect((await get(notes.deleted.id)).body).toEqual(NOT_FOUND);
		const deleted = await get(notes.deleted.id, EXCLUDE);
		expect(deleted.body.data.deleted_at).toEqual(expect.any(String));
		expect(deleted.body.data.deleted_by).toBe(p.root.user_id);

		const restored = await get(notes.restored.id);
		expect(restored.body.data).toMatchObject({ deleted_at: null, restored_by: p.root.user_id });
		expect((await get(notes.destroyed.id, EXCLUDE)).body).toEqual(NOT_FOUND);

		const ids = Object.values(notes).map((n) => n.id);
		const q = encodeURIComponent(JSON.stringify({ id: { $in: ids } }));
		expect((await call("GET", `/content/notes/count?query=${q}`)).body).toEqual({ total: 3 });
		expect((await call("GET", `/content/notes/count?query=${q}`, { headers: EXCLUDE })).body).toEqual({ total: 4 });

		expect((await call("GET", `/identity/users/${user.id}`)).body).toEqual({ data: user });
		expect((await call("GET", `/domain/clients/${clientGenerated.id}`)).body).toEqual({ data: clientGenerated });
		expect((await call("GET", `/domain/clients/${clientGiven.id}`)).body).toEqual({ data: clientGiven });
		// The restarted platform writes on.
		expect((await call("PATCH", `/content/notes/${notes.plain.id}`, { body: { content: "after restart" } })).status).toBe(200);
	});

	test("the outbox kept every event, in order, and continues after the restart", async () => {
		const after = await readOutbox();
		expect(after.length).toBeGreaterThan(outboxBefore.length);
		expect(after.slice(0, outboxBefore.length)).toEqual(outboxBefore);
		const seqs = after.map((r) => r.seq);
		for (let i = 1; i < seqs.length; i++) expect(seqs[i]).toBeGreaterThan(seqs[i - 1]);
		const last = after[after.length - 1];
		expect(last.event).toMatchObject({ id: notes.plain.id, op: "u", topic: "content.notes" });
		expect(last.event.after).toMatchObject({ content: "after restart" });
	});

	test("change events per docs/contracts.md: c, u, d (no after), r, in the webhook format", async () => {
		const all = await readOutbox();
		const of = (id: string) => all.filter((r) => r.event.id === id);
		const ops = (id: string) => of(id).map((r) => r.event.op);
		expect(ops(notes.patched.id)).toEqual(["c", "u"]);
		expect(ops(notes.deleted.id)).toEqual(["c", "d"]);
		expect(ops(notes.restored.id)).toEqual(["c", "d", "r"]);
		expect(ops(notes.destroyed.id)).toEqual(["c", "d"]);
		expect(ops(notes.plain.id)).toEqual(["c", "u"]);
		expect(ops(user.id)).toEqual(["c", "u"]);

		const now = Date.now();
		for (const n of Object.values(notes)) {
			for (const rec of of(n.id)) {
				const e = rec.event;
				expect(EVENT_KEYS).toEqual(expect.arrayContaining(Object.keys(e)));
				expect(e).toMatchObject({ id: n.id, topic: "content.notes", source: { name: expect.any(String), db: "content", collection: "notes" } });
				expect(Object.keys(e.source).sort()).toEqual(["collection", "db", "name"]);
				expect(Number.isInteger(e.ts_ms)).toBe(true);
				expect(e.ts_ms).toBeGreaterThanOrEqual(startedAt);
				expect(e.ts_ms).toBeLessThanOrEqual(now);
				// Routing facts of the record (not part of the webhook body).
				expect(rec.clients).toEqual([p.root.client_id]);
				expect(rec.owner).toBe(p.root.user_id);
				expect(rec.actor.uid).toBe(p.root.user_id);
				switch (e.op) {
					case "c":
						expect(e.before).toBeUndefined();
						expect(e.after).toMatchObject({ id: n.id, title: n.title, version: "1.0.0", deleted_at: null });
						break;
					case "u":
						expect(e.before).toMatchObject({ id: n.id });
						expect(e.after).toMatchObject({ id: n.id });
						break;
					case "d":
						expect(e.after).toBeUndefined();
						expect("after" in e).toBe(false);
						expect(e.before).toMatchObject({ id: n.id });
						break;
					case "r":
						expect(e.before?.deleted_at).toEqual(expect.any(String));
						expect(e.after).toMatchObject({ id: n.id, deleted_at: null });
						break;
				}
			}
		}
		const [, update] = of(notes.patched.id);
		expect(update.event.before).toMatchObject({ title: "to patch" });
		expect(update.event.after).toMatchObject({ title: patchedTitle });
		// Soft delete: the state before is the live document.
		expect(of(notes.deleted.id)[1].event.before).toMatchObject({ deleted_at: null });
	});

	test("no password, secret or hash anywhere in the events or the outbox file", async () => {
		const all = await readOutbox();
		const text = JSON.stringify(all);
		for (const s of plaintexts) expect(text.includes(s)).toBe(false);
		expect(text).not.toMatch(BCRYPT);
		const userEvents = all.filter((r) => r.event.topic === "identity.users");
		const clientEvents = all.filter((r) => r.event.topic === "domain.clients");
		expect(userEvents.length).toBeGreaterThanOrEqual(3); // root seed, create, patch
		expect(clientEvents.length).toBeGreaterThanOrEqual(3); // root seed, two creates
		for (const r of [...userEvents, ...clientEvents]) {
			for (const doc of [r.event.after, r.event.before]) {
				if (!doc) continue;
				expect(Object.keys(doc)).not.toContain("password");
				expect(Object.keys(doc)).not.toContain("secret");
			}
		}
		// What the document store holds (PostgreSQL's rows): hashes only in users and clients, plaintexts nowhere.
		const stored = await storedTexts(p);
		expect(Object.keys(stored)).toEqual(expect.arrayContaining(["_outbox", "identity/users", "domain/clients", "content/notes", "auth/grants"]));
		for (const [name, raw] of Object.entries(stored)) {
			for (const s of plaintexts) expect({ name, leaks: raw.includes(s) }).toEqual({ name, leaks: false });
			if (!["identity/users", "domain/clients"].includes(name)) expect({ name, hash: BCRYPT.test(raw) }).toEqual({ name, hash: false });
		}
		expect(stored._outbox).toContain(notes.destroyed.id);
	});
});
