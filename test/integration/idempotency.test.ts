/**
 * Idempotency-Key (docs/contracts.md "Retries and concurrent writers"; docs/api.md "Retrying safely"), on both document
 * stores: replay without a second write or event, 422 for another request under the key, 409 while the first runs,
 * keys per principal (two principals, two tenants), 400 for keys that are not 1-255 printable ASCII, 4xx answers kept,
 * answers over 64 KB kept as a digest and rebuilt by re-reading, a committed record whose answer was lost (node died)
 * rebuilt, a stale attempt's write refused by the fence, the key kept across a restart, and the cleaner's purge.
 */
import { bootTenancy, ok, type Tenancy } from "../helpers/tenants";
import { IdempotencyStoreRef, IDEMPOTENCY_TTL_MS, IN_PROGRESS, KEY_REUSED, type IdemRecord } from "../../engine/idempotency-record";
import { createHash } from "crypto";
import { openApiDocument } from "../../lib/openapi";

jest.setTimeout(180_000);

const K = "Idempotency-Key";
let n = 0;
const key = () => `key-${Date.now()}-${++n}`;
/** The record id of a principal's key, as the gateway derives it. */
const recordId = (who: string, k: string) => createHash("sha256").update(`${who}\n${k}`).digest("base64url");

describe("Idempotency-Key", () => {
	let t: Tenancy;
	let records: IdempotencyStoreRef;
	beforeAll(async () => {
		t = await bootTenancy();
		records = new IdempotencyStoreRef(t.p.cfg);
	});
	afterAll(async () => {
		await records?.release();
		await t?.cleanup();
	});

	const notes = async (token: string, title: string) =>
		(await ok(t.as(token, "GET", `/content/notes?query=${encodeURIComponent(JSON.stringify({ title }))}&pagination=${encodeURIComponent('{"limit":100}')}`), "list"))
			.items as Array<{ id: string }>;
	const outboxCount = async () => {
		const { sharedOutbox } = await import("../../events/outbox");
		return sharedOutbox(t.p.cfg).count();
	};

	test("a kept answer is sealed at rest (a creation's answer may carry a secret shown once); its replay is the answer", async () => {
		const k = key();
		const marker = `sealed-${k}`;
		const first = await ok(t.as(t.a.member.token, "POST", "/content/notes", { title: marker }, { [K]: k }), "create");
		const rec = (await (await records.get()).findOne({ id: recordId(`u:${t.a.member.id}`, k) })) as IdemRecord;
		expect(rec.state).toBe("done");
		expect(typeof rec.body).toBe("string");
		expect(JSON.stringify(rec)).not.toContain(marker);
		const again = await t.as(t.a.member.token, "POST", "/content/notes", { title: marker }, { [K]: k });
		expect(again.headers.get("idempotent-replayed")).toBe("true");
		expect(again.body).toEqual({ data: first.data });
	});

	test("a repeat replays the kept answer with Idempotent-Replayed: true and writes nothing, no change event", async () => {
		const k = key();
		const title = `replay-${k}`;
		const first = await t.as(t.a.member.token, "POST", "/content/notes", { title }, { [K]: k });
		expect(first.status).toBe(200);
		expect(first.headers.get("idempotent-replayed")).toBeNull();
		const events = await outboxCount();
		const again = await t.as(t.a.member.token, "POST", "/content/notes", { title }, { [K]: k });
		expect(again.status).toBe(200);
		expect(again.headers.get("idempotent-replayed")).toBe("true");
		expect(again.body).toEqual(first.body);
		// Same body with its keys in another order: the same request.
		const reordered = await t.as(t.a.member.token, "POST", "/content/notes", JSON.parse(JSON.stringify({ title })), { [K]: k });
		expect(reordered.headers.get("idempotent-replayed")).toBe("true");
		expect(await notes(t.a.member.token, title)).toHaveLength(1);
		expect(await outboxCount()).toBe(events);
		// PATCH and DELETE too.
		const id = first.body.data.id;
		const pk = key();
		const patched = await ok(t.as(t.a.member.token, "PATCH", `/content/notes/${id}`, { description: "one" }, { [K]: pk }), "patch");
		const events2 = await outboxCount();
		const patchedAgain = await t.as(t.a.member.token, "PATCH", `/content/notes/${id}`, { description: "one" }, { [K]: pk });
		expect(patchedAgain.headers.get("idempotent-replayed")).toBe("true");
		expect(patchedAgain.body).toEqual(patched);
		expect(await outboxCount()).toBe(events2);
		const dk = key();
		await ok(t.as(t.a.member.token, "DELETE", `/content/notes/${id}`, undefined, { [K]: dk }), "delete");
		const deletedAgain = await t.as(t.a.member.token, "DELETE", `/content/notes/${id}`, undefined, { [K]: dk });
		expect(deletedAgain.status).toBe(200);
		expect(deletedAgain.headers.get("idempotent-replayed")).toBe("true");
	});

	test("the same key with another body, path, query or method answers 422 and changes nothing", async () => {
		const k = key();
		const title = `reuse-${k}`;
		const first = await ok(t.as(t.a.member.token, "POST", "/content/notes", { title }, { [K]: k }), "create");
		const other = [
			t.as(t.a.member.token, "POST", "/content/notes", { title: `${title}-other` }, { [K]: k }),
			t.as(t.a.member.token, "POST", "/content/posts", { title }, { [K]: k }),
			// Another query: the one parameter a create takes, the same bearer again.
			t.as(t.a.member.token, "POST", `/content/notes?token=${t.a.member.token}`, { title }, { [K]: k }),
			t.as(t.a.member.token, "PATCH", `/content/notes/${first.data.id}`, { title }, { [K]: k }),
		];
		for (const r of await Promise.all(other)) expect([r.status, r.body]).toEqual([422, { statusCode: 422, message: KEY_REUSED, error: "Unprocessable Entity" }]);
		expect(await notes(t.a.member.token, `${title}-other`)).toHaveLength(0);
		expect((await ok(t.as(t.a.member.token, "GET", `/content/notes/${first.data.id}`), "get")).data.title).toBe(title);
	});

	test("repeats while the first request runs answer 409 (another body: 422); once it answers, they replay; one document", async () => {
		const k = key();
		const title = `running-${k}`;
		// The first request is held inside its write (at the fence, its record `running`) until the repeats have answered.
		const s = await records.get();
		const updateIf = s.updateIf;
		let release!: () => void;
		const gate = new Promise<void>((r) => (release = r));
		let entered!: () => void;
		const inWrite = new Promise<void>((r) => (entered = r));
		s.updateIf = async (q, u) => {
			if ((q as { state?: { $in?: unknown } }).state?.$in) {
				entered();
				await gate;
			}
			return updateIf.call(s, q, u);
		};
		try {
			const first = t.as(t.a.member.token, "POST", "/content/notes", { title }, { [K]: k });
			await inWrite;
			const repeats = await Promise.all(Array.from({ length: 5 }, () => t.as(t.a.member.token, "POST", "/content/notes", { title }, { [K]: k })));
			for (const r of repeats) expect([r.status, r.body]).toEqual([409, { statusCode: 409, message: IN_PROGRESS, error: "Conflict" }]);
			const other = await t.as(t.a.member.token, "POST", "/content/notes", { title: `${title}-b` }, { [K]: k });
			expect([other.status, other.body.message]).toEqual([422, KEY_REUSED]);
			release();
			expect((await first).status).toBe(200);
		} finally {
			release();
			s.updateIf = updateIf;
		}
		const after = await t.as(t.a.member.token, "POST", "/content/notes", { title }, { [K]: k });
		expect([after.status, after.headers.get("idempotent-replayed")]).toEqual([200, "true"]);
		expect(await notes(t.a.member.token, title)).toHaveLength(1);
	});

	test("concurrent requests under one key: exactly one runs, the others answer 409 or replay it; one document", async () => {
		const k = key();
		const title = `race-${k}`;
		const all = await Promise.all(Array.from({ length: 12 }, () => t.as(t.a.member.token, "POST", "/content/notes", { title }, { [K]: k })));
		const ran = all.filter((r) => r.status === 200 && r.headers.get("idempotent-replayed") === null);
		expect(ran).toHaveLength(1);
		for (const r of all) {
			if (r.status === 409) expect(r.body).toEqual({ statusCode: 409, message: IN_PROGRESS, error: "Conflict" });
			else expect([r.status, r.body]).toEqual([200, ran[0].body]);
		}
		expect(await notes(t.a.member.token, title)).toHaveLength(1);
	});

	test("keys belong to the principal: the same key of two users, of two tenants and of the operator are independent", async () => {
		const k = key();
		const title = `principal-${k}`;
		const tokens = [t.a.member.token, t.a.admin.token, t.b.member.token, t.root];
		const answers = await Promise.all(tokens.map((tok) => t.as(tok, "POST", "/content/notes", { title }, { [K]: k })));
		for (const r of answers) {
			expect(r.status).toBe(200);
			expect(r.headers.get("idempotent-replayed")).toBeNull();
		}
		expect(new Set(answers.map((r) => r.body.data.id)).size).toBe(4);
		// Tenant b's member replays its own answer, never tenant a's.
		const replay = await t.as(t.b.member.token, "POST", "/content/notes", { title }, { [K]: k });
		expect(replay.headers.get("idempotent-replayed")).toBe("true");
		expect(replay.body.data.id).toBe(answers[2].body.data.id);
		expect(await notes(t.b.member.token, title)).toHaveLength(1);
	});

	test("keys that are not 1 to 255 printable ASCII characters answer 400; GET ignores the header", async () => {
		const bad = ["", "x".repeat(256), "tab\there"];
		for (const k of bad) {
			const r = await t.as(t.a.member.token, "POST", "/content/notes", { title: `bad-key-${n++}` }, { [K]: k });
			expect([r.status, r.body]).toEqual([400, { statusCode: 400, message: "Idempotency-Key must be 1 to 255 printable ASCII characters", error: "Bad Request" }]);
		}
		const longest = await t.as(t.a.member.token, "POST", "/content/notes", { title: `longest-${n++}` }, { [K]: "~".repeat(255) });
		expect(longest.status).toBe(200);
		expect((await t.as(t.a.member.token, "GET", "/content/notes", undefined, { [K]: "" })).status).toBe(200);
	});

	test("an answer below 500 is kept (a 400 replays as a 400), and a kept 4xx does not run the request again", async () => {
		const k = key();
		const first = await t.as(t.a.member.token, "POST", "/content/notes", { title: 5 }, { [K]: k });
		expect(first.status).toBe(400);
		const again = await t.as(t.a.member.token, "POST", "/content/notes", { title: 5 }, { [K]: k });
		expect([again.status, again.headers.get("idempotent-replayed"), again.body]).toEqual([400, "true", first.body]);
	});

	test("an answer over 64 KB keeps its status and digest; a replay re-reads the documents", async () => {
		const k = key();
		const title = `big-${k}`;
		const items = Array.from({ length: 60 }, (_, i) => ({ title, description: `${i}-${"d".repeat(1500)}` }));
		const first = await t.as(t.a.member.token, "POST", "/content/notes/bulk", { items }, { [K]: k });
		expect(first.status).toBe(200);
		expect(first.text.length).toBeGreaterThan(64 * 1024);
		const rec = (await (await records.get()).findOne({ id: recordId(`u:${t.a.member.id}`, k) })) as IdemRecord;
		expect(rec.state).toBe("done");
		expect(rec.body).toBeUndefined();
		expect(typeof rec.digest).toBe("string");
		const again = await t.as(t.a.member.token, "POST", "/content/notes/bulk", { items }, { [K]: k });
		expect([again.status, again.headers.get("idempotent-replayed")]).toEqual([200, "true"]);
		expect(again.body.total).toBe(60);
		expect(again.body.items.map((d: { id: string }) => d.id).sort()).toEqual(first.body.items.map((d: { id: string }) => d.id).sort());
		expect(await notes(t.a.member.token, title)).toHaveLength(60);
	});

	test("a committed write whose answer was never kept (its node died) replays the document re-read, writes nothing", async () => {
		const k = key();
		const title = `lost-${k}`;
		const first = await ok(t.as(t.a.member.token, "POST", "/content/notes", { title }, { [K]: k }), "create");
		// As a node that died after its commit leaves it: committed, no answer, its gateway's lease given up.
		const s = await records.get();
		const id = recordId(`u:${t.a.member.id}`, k);
		await s.updateIf({ id }, { $set: { state: "committed", lease: 0 }, $unset: { body: true, status: true, headers: true } });
		const again = await t.as(t.a.member.token, "POST", "/content/notes", { title }, { [K]: k });
		expect([again.status, again.headers.get("idempotent-replayed")]).toEqual([200, "true"]);
		expect(again.body.data).toEqual(first.data);
		expect(await notes(t.a.member.token, title)).toHaveLength(1);
		expect(((await s.findOne({ id })) as IdemRecord).state).toBe("done");
	});

	test("a committed record still within its gateway's lease answers 409 (the first request is still answering)", async () => {
		const k = key();
		await ok(t.as(t.a.member.token, "POST", "/content/notes", { title: `lease-${k}` }, { [K]: k }), "create");
		const s = await records.get();
		await s.updateIf({ id: recordId(`u:${t.a.member.id}`, k) }, { $set: { state: "committed", lease: Date.now() + 60_000 }, $unset: { body: true } });
		const r = await t.as(t.a.member.token, "POST", "/content/notes", { title: `lease-${k}` }, { [K]: k });
		expect([r.status, r.body.message]).toEqual([409, IN_PROGRESS]);
	});

	test("a key held by a gateway instance that is gone (this node restarted) is taken over at once, before its lease ends", async () => {
		const s = await records.get();
		const node = t.p.broker.nodeID;
		const title = `gone-${key()}`;
		// The fingerprint of the request, from a first run under another key (it does not depend on the key).
		const seed = key();
		await ok(t.as(t.a.member.token, "POST", "/content/notes", { title }, { [K]: seed }), "create");
		const fp = ((await s.findOne({ id: recordId(`u:${t.a.member.id}`, seed) })) as IdemRecord).fp;
		const held = (k: string, state: string, inst: string) =>
			s.insert({ id: recordId(`u:${t.a.member.id}`, k), fp, action: "content.notes.create", state, attempt: "old", lease: Date.now() + 60_000, at: Date.now(), node, inst });
		// Held by this very instance: still running.
		const mine = key();
		await held(mine, "running", t.p.broker.instanceID);
		expect((await t.as(t.a.member.token, "POST", "/content/notes", { title }, { [K]: mine })).body).toEqual({ statusCode: 409, message: IN_PROGRESS, error: "Conflict" });
		// Held by a previous instance of this node, not committed: the retry runs under a new attempt.
		const running = key();
		await held(running, "running", "previous-instance");
		const ran = await t.as(t.a.member.token, "POST", "/content/notes", { title }, { [K]: running });
		expect([ran.status, ran.headers.get("idempotent-replayed"), ran.body.data.title]).toEqual([200, null, title]);
		expect((await s.findOne({ id: recordId(`u:${t.a.member.id}`, running) })) as IdemRecord).toMatchObject({ state: "done", node, inst: t.p.broker.instanceID });
		// Committed by a previous instance that died before answering: the retry replays the written document.
		const committed = key();
		await held(committed, "committed", "previous-instance");
		await s.updateIf({ id: recordId(`u:${t.a.member.id}`, committed) }, { $set: { ref: { ids: [ran.body.data.id] } } });
		const replayed = await t.as(t.a.member.token, "POST", "/content/notes", { title }, { [K]: committed });
		expect([replayed.status, replayed.headers.get("idempotent-replayed"), replayed.body.data]).toEqual([200, "true", ran.body.data]);
		expect(await notes(t.a.member.token, title)).toHaveLength(2);
	});

	test("a write under a stale attempt (a retry took the key over) is refused with 409", async () => {
		const k = key();
		const title = `stale-${k}`;
		const id = recordId(`u:${t.a.member.id}`, k);
		const s = await records.get();
		await s.insert({ id, fp: "x", action: "content.notes.create", state: "running", attempt: "new-attempt", lease: Date.now() + 60_000, at: Date.now() });
		const call = t.p.broker.call(
			"content.notes.create",
			{ body: { title } },
			{ meta: { token: await tokenClaims(t.a.member.token), idempotency: { id, attempt: "old-attempt", col: "content/notes" } } },
		);
		await expect(call).rejects.toMatchObject({ code: 409, message: IN_PROGRESS });
		// The document and its record commit together or not at all.
		expect(await notes(t.a.member.token, title)).toHaveLength(0);
		expect(((await s.findOne({ id })) as IdemRecord).state).toBe("running");
	});

	test("the key and its answer survive a restart", async () => {
		const k = key();
		const title = `restart-${k}`;
		const first = await ok(t.as(t.a.member.token, "POST", "/content/notes", { title }, { [K]: k }), "create");
		await records.release();
		await t.p.restart();
		const again = await t.as(t.a.member.token, "POST", "/content/notes", { title }, { [K]: k });
		expect([again.status, again.headers.get("idempotent-replayed")]).toEqual([200, "true"]);
		expect(again.body).toEqual(first);
		expect(await notes(t.a.member.token, title)).toHaveLength(1);
		const reused = await t.as(t.a.member.token, "POST", "/content/notes", { title: "other" }, { [K]: k });
		expect(reused.status).toBe(422);
	});

	test("the cleaner removes keys older than 24 hours; a key past 24 hours runs again", async () => {
		const k = key();
		const title = `expired-${k}`;
		await ok(t.as(t.a.member.token, "POST", "/content/notes", { title }, { [K]: k }), "create");
		const s = await records.get();
		const id = recordId(`u:${t.a.member.id}`, k);
		await s.updateIf({ id }, { $set: { at: Date.now() - IDEMPOTENCY_TTL_MS - 1000 } });
		// Past 24 hours and not yet cleaned: the key is new again.
		const again = await t.as(t.a.member.token, "POST", "/content/notes", { title }, { [K]: k });
		expect([again.status, again.headers.get("idempotent-replayed")]).toEqual([200, null]);
		expect(await notes(t.a.member.token, title)).toHaveLength(2);
		await s.updateIf({ id }, { $set: { at: Date.now() - IDEMPOTENCY_TTL_MS - 1000 } });
		const pass = (await t.p.broker.call("cleaner.run")) as { idempotency?: number };
		expect(pass.idempotency).toBeGreaterThanOrEqual(1);
		expect(await s.findOne({ id })).toBeNull();
	});

	/** The claims of a token, as the gateway passes them to the domains. */
	async function tokenClaims(token: string): Promise<Record<string, unknown>> {
		return JSON.parse(Buffer.from(token.split(".")[1], "base64url").toString("utf8"));
	}
});

describe("Idempotency-Key in the OpenAPI document", () => {
	const doc = openApiDocument() as {
		paths: Record<string, Record<string, { parameters?: Array<{ $ref?: string }>; responses: Record<string, { $ref?: string }> }>>;
		components: { parameters: Record<string, { name: string; in: string }>; responses: Record<string, unknown> };
	};
	const keyed = (op: { parameters?: Array<{ $ref?: string }> }) => !!op.parameters?.some((p) => p.$ref === "#/components/parameters/idempotencyKey");

	test("every authenticated POST, PATCH, PUT and DELETE declares the header and its 409 and 422 answers", () => {
		expect(doc.components.parameters.idempotencyKey).toMatchObject({ name: "Idempotency-Key", in: "header" });
		expect(doc.components.responses.UnprocessableEntity).toBeDefined();
		let writes = 0;
		for (const [path, ops] of Object.entries(doc.paths))
			for (const [method, op] of Object.entries(ops)) {
				const write = ["post", "patch", "put", "delete"].includes(method);
				const exempt = path === "/auth/token" || !!(op as { security?: unknown[] }).security;
				expect([path, method, keyed(op)]).toEqual([path, method, write && !exempt]);
				if (!keyed(op)) continue;
				writes++;
				expect([path, method, op.responses["409"]?.$ref, op.responses["422"]?.$ref, op.responses["400"]?.$ref]).toEqual([
					path,
					method,
					"#/components/responses/Conflict",
					"#/components/responses/UnprocessableEntity",
					"#/components/responses/BadRequest",
				]);
			}
		expect(writes).toBeGreaterThan(300);
		for (const [path, method] of [
			["/content/notes", "post"],
			["/content/notes/{id}", "patch"],
			["/content/notes/{id}", "delete"],
			["/content/notes/{id}/restore", "put"],
			["/financial/invoices/{id}/payment", "post"],
			["/touch/emails/send", "post"],
		])
			expect([path, method, keyed(doc.paths[path][method])]).toEqual([path, method, true]);
	});
});
