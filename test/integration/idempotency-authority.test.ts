/**
 * An Idempotency-Key repeat is decided like the request itself (docs/api.md "Idempotency-Key", docs/security.md), on
 * both document stores with two tenants: a token of the same user that could not make the request now (a read-only
 * APT, a narrowed password token, a logged-out token) gets the request's 403 or 401 and never the kept answer, not
 * even a 409 or 422 about the key; a kept answer holding a value shown once (an APT, a client's secret, a share key)
 * is replayed as kept only to the session that made the request, and rebuilt as any other session sees it now; a
 * kept document showing a field the repeating token may not read is rebuilt too; a replay writes a request audit row
 * marked as a replay.
 */
import { bootTenancy, ok, type Tenancy } from "../helpers/tenants";
import { IdempotencyStoreRef, IN_PROGRESS } from "../../engine/idempotency-record";
import { openRelational, releaseRelational, type Relational } from "../../runtime/relational";
import { eventually } from "../helpers/wait";
import { createHash } from "crypto";

jest.setTimeout(240_000);

const K = "Idempotency-Key";
const REPLAYED = "idempotent-replayed";
let n = 0;
const key = (what: string) => `${what}-${Date.now()}-${++n}`;
/** The record id of a principal's key, as the gateway derives it. */
const recordId = (who: string, k: string) => createHash("sha256").update(`${who}\n${k}`).digest("base64url");
const forbidden = (message: string) => ({ statusCode: 403, message, error: "Forbidden" });

describe("an Idempotency-Key repeat", () => {
	let t: Tenancy;
	let records: IdempotencyStoreRef;
	let db: Relational;
	beforeAll(async () => {
		t = await bootTenancy();
		records = new IdempotencyStoreRef(t.p.cfg);
		db = await openRelational(t.p.cfg);
	});
	afterAll(async () => {
		await records?.release();
		if (db) await releaseRelational(t.p.cfg);
		await t?.cleanup();
	});

	/** A password token of tenant a's member, narrowed to what `asked` names (scopes, subjects). */
	const memberLogin = async (asked: Record<string, unknown> = {}) =>
		(
			await ok(
				t.p.http("POST", "/auth/token", { body: { grant_type: "password", client_id: t.a.client.id, username: "member", password: t.a.member.password, ...asked } }),
				"member login",
			)
		).data.access_token as string;
	const apt = async (by: string, body: Record<string, unknown>) => (await ok(t.as(by, "POST", "/auth/apts", body), "apt")).data as { id: string; token: string };

	test("a read-only APT of the same user repeating an APT creation gets 403, before and after the first token logged out; the logged-out token gets 401", async () => {
		const first = await memberLogin();
		const reader = await apt(first, { name: "reader", scopes: ["read:content:notes"] });
		expect((await t.as(reader.token, "POST", "/content/notes", { title: "no" })).body).toEqual(forbidden("token scope does not cover write:content:notes"));
		const k = key("deploy");
		const body = { name: "deploy", scopes: ["whole"] };
		const made = await t.as(first, "POST", "/auth/apts", body, { [K]: k });
		expect(made.status).toBe(200);
		const secret = made.body.data.token as string;
		expect(secret).toMatch(/^APT-/);
		const refused = await t.as(reader.token, "POST", "/auth/apts", body, { [K]: k });
		expect([refused.status, refused.headers.get(REPLAYED), refused.body]).toEqual([403, null, forbidden("token scope does not cover write:auth:apts")]);
		expect(refused.text).not.toContain(secret);
		// The key with another body, to the same token: the request's 403 too, not the key's 422.
		expect((await t.as(reader.token, "POST", "/auth/apts", { name: "other" }, { [K]: k })).body).toEqual(forbidden("token scope does not cover write:auth:apts"));
		expect((await ok(t.as(first, "GET", "/auth/logout"), "logout")).result).toBe("OK");
		const after = await t.as(reader.token, "POST", "/auth/apts", body, { [K]: k });
		expect([after.status, after.body]).toEqual([403, forbidden("token scope does not cover write:auth:apts")]);
		const loggedOut = await t.as(first, "POST", "/auth/apts", body, { [K]: k });
		expect([loggedOut.status, loggedOut.headers.get(REPLAYED), loggedOut.body]).toEqual([401, null, { statusCode: 401, message: "session is revoked", error: "Unauthorized" }]);
		// The APT made first was never handed out again: its only copy is the first answer.
		expect(JSON.stringify([refused.body, after.body, loggedOut.body])).not.toContain(secret.slice(4));
	});

	test("a narrowed password token of the same user gets 403; a repeat while the first runs is decided first too (403, not 409)", async () => {
		const full = await memberLogin();
		const narrow = await memberLogin({ scopes: ["read:content:notes"] });
		const k = key("narrow");
		const body = { name: "deploy", scopes: ["whole"] };
		const secret = (await ok(t.as(full, "POST", "/auth/apts", body, { [K]: k }), "create")).data.token as string;
		const r = await t.as(narrow, "POST", "/auth/apts", body, { [K]: k });
		expect([r.status, r.headers.get(REPLAYED), r.body]).toEqual([403, null, forbidden("token scope does not cover write:auth:apts")]);
		expect(r.text).not.toContain(secret);
		// A key whose first request still runs: the narrowed token learns nothing of it; the full token waits (409).
		const s = await records.get();
		const same = key("running-same");
		const first = await ok(t.as(full, "POST", "/content/notes", { title: same }, { [K]: same }), "create");
		await s.updateIf({ id: recordId(`u:${t.a.member.id}`, same) }, { $set: { state: "running", lease: Date.now() + 60_000 } });
		expect((await t.as(narrow, "POST", "/content/notes", { title: same }, { [K]: same })).body).toEqual(forbidden("token scope does not cover write:content:notes"));
		expect((await t.as(full, "POST", "/content/notes", { title: same }, { [K]: same })).body).toEqual({ statusCode: 409, message: IN_PROGRESS, error: "Conflict" });
		expect(first.data.title).toBe(same);
	});

	test("another tenant's user repeating the key and body runs its own request and never sees tenant a's answer", async () => {
		const k = key("tenant");
		const body = { name: "deploy", scopes: ["whole"] };
		const a = await ok(t.as(t.a.member.token, "POST", "/auth/apts", body, { [K]: k }), "a");
		const b = await t.as(t.b.member.token, "POST", "/auth/apts", body, { [K]: k });
		expect([b.status, b.headers.get(REPLAYED)]).toEqual([200, null]);
		expect(b.body.data.id).not.toBe(a.data.id);
		expect(b.text).not.toContain(a.data.token);
		const bAgain = await t.as(t.b.member.token, "POST", "/auth/apts", body, { [K]: k });
		expect([bAgain.status, bAgain.headers.get(REPLAYED), bAgain.body]).toEqual([200, "true", b.body]);
	});

	test("an answer holding a value shown once is replayed as kept only to its session; another session gets it rebuilt, without the value", async () => {
		// An APT (the engine's create).
		const k = key("once");
		const body = { name: "deploy", scopes: ["whole"] };
		const made = await ok(t.as(t.a.member.token, "POST", "/auth/apts", body, { [K]: k }), "create");
		const mine = await t.as(t.a.member.token, "POST", "/auth/apts", body, { [K]: k });
		expect([mine.status, mine.headers.get(REPLAYED), mine.body]).toEqual([200, "true", made]);
		const other = await t.as(await memberLogin(), "POST", "/auth/apts", body, { [K]: k });
		expect([other.status, other.headers.get(REPLAYED)]).toEqual([200, "true"]);
		const { token: _shown, ...rest } = made.data;
		expect(other.body).toEqual({ data: rest });
		expect(other.text).not.toContain(made.data.token.slice(4));
		// A client's secret (the engine's create), by the operator.
		const ck = key("client");
		const client = { name: `replayed ${ck}`, domains: [`${ck}.example`], scopes: ["read:content"] };
		const created = await ok(t.as(t.root, "POST", "/domain/clients", client, { [K]: ck }), "client");
		expect(typeof created.data.secret).toBe("string");
		const root2 = (
			await ok(
				t.p.http("POST", "/auth/token", { body: { grant_type: "password", client_id: t.p.root.client_id, username: t.p.root.username, password: t.p.root.password } }),
				"root",
			)
		).data.access_token;
		const again = await t.as(root2, "POST", "/domain/clients", client, { [K]: ck });
		expect([again.status, again.headers.get(REPLAYED), again.body.data.id]).toEqual([200, "true", created.data.id]);
		expect(again.body.data).not.toHaveProperty("secret");
		expect(again.text).not.toContain(created.data.secret);
		expect((await t.as(t.root, "POST", "/domain/clients", client, { [K]: ck })).body).toEqual(created);
		// A share key (a special action), by tenant a's admin.
		const fd = new FormData();
		fd.append("file", new Blob(["shared once"], { type: "text/plain" }), "once.txt");
		const up = await fetch(`${t.p.url}/special/files/upload`, { method: "POST", body: fd, headers: { authorization: `Bearer ${t.a.admin.token}` } });
		expect(up.status).toBe(200);
		const file = ((await up.json()) as { items: Array<{ id: string }> }).items[0].id;
		const sk = key("share");
		const shared = await ok(t.as(t.a.admin.token, "POST", `/special/files/${file}/share`, { ttl: 60 }, { [K]: sk }), "share");
		expect(typeof shared.data.key).toBe("string");
		const admin2 = await t.login(t.a, t.a.admin.username, t.a.admin.password);
		const reshared = await t.as(admin2, "POST", `/special/files/${file}/share`, { ttl: 60 }, { [K]: sk });
		expect([reshared.status, reshared.headers.get(REPLAYED), reshared.body.data.id]).toEqual([200, "true", file]);
		expect(reshared.text).not.toContain(shared.data.key);
		expect((await t.as(t.a.admin.token, "POST", `/special/files/${file}/share`, { ttl: 60 }, { [K]: sk })).body).toEqual(shared);
	});

	test("a kept document showing a field the repeating token may not read is rebuilt in that token's view", async () => {
		const own = t.a.limited.subject;
		const team = `team-y.example@${t.a.domain}`;
		for (const action of ["write", "read"]) {
			await t.grant(t.a.admin.token, { subject: own, action, object: "content:notes" });
			await t.grant(t.a.admin.token, { subject: team, action, object: "content:notes", field: ["title"] });
		}
		const full = await t.login(t.a, "limited", t.a.limited.password);
		const teamOnly = (
			await ok(
				t.p.http("POST", "/auth/token", {
					body: { grant_type: "password", client_id: t.a.client.id, username: "limited", password: t.a.limited.password, subjects: ["team-y.example"] },
				}),
				"login",
			)
		).data.access_token as string;
		const k = key("fields");
		const made = await ok(t.as(full, "POST", "/content/notes", { title: k }, { [K]: k }), "create");
		expect(made.data).toHaveProperty("owner");
		const r = await t.as(teamOnly, "POST", "/content/notes", { title: k }, { [K]: k });
		expect([r.status, r.headers.get(REPLAYED), r.body]).toEqual([200, "true", { data: { id: made.data.id, title: k } }]);
		expect((await t.as(full, "POST", "/content/notes", { title: k }, { [K]: k })).body).toEqual(made);
		// A value shown once is not a field of the grant's list: its own session still gets it, with the listed fields.
		await t.grant(t.a.admin.token, { subject: own, action: "write", object: "auth:apts", field: ["name"] });
		const ak = key("apt-fields");
		const apt = await ok(t.as(full, "POST", "/auth/apts", { name: ak }, { [K]: ak }), "apt");
		expect(Object.keys(apt.data).sort()).toEqual(["id", "name", "token"]);
		const aptAgain = await t.as(full, "POST", "/auth/apts", { name: ak }, { [K]: ak });
		expect([aptAgain.status, aptAgain.headers.get(REPLAYED), aptAgain.body]).toEqual([200, "true", apt]);
	});

	test("a replay writes a request audit row marked as a replay; a refused repeat writes the request's row", async () => {
		const note = await ok(t.as(t.a.member.token, "POST", "/content/notes", { title: key("audited") }), "create");
		const path = `/content/notes/${note.data.id}`;
		const k = key("audit");
		await ok(t.as(t.a.member.token, "PATCH", path, { description: "once" }, { [K]: k }), "patch");
		const again = await t.as(t.a.member.token, "PATCH", path, { description: "once" }, { [K]: k });
		expect([again.status, again.headers.get(REPLAYED)]).toEqual([200, "true"]);
		const narrow = await memberLogin({ scopes: ["read:content:notes"] });
		expect((await t.as(narrow, "PATCH", path, { description: "once" }, { [K]: k })).status).toBe(403);
		const rows = await eventually(
			() =>
				db
					.query<Record<string, unknown>>(
						"select method, path, action, document_id, status, uid, replayed from audit_entries where kind = 'request' and method = 'PATCH' and path = $1 order by at, id",
						[path],
					)
					.then((q) => q.rows),
			(r) => r.length >= 3,
		);
		const row = { method: "PATCH", path, action: "content.notes.patch", document_id: note.data.id, uid: t.a.member.id };
		expect(rows).toEqual([
			{ ...row, status: 200, replayed: null },
			{ ...row, status: 200, replayed: true },
			{ ...row, status: 403, replayed: null },
		]);
	});
});
