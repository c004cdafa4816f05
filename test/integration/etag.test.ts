/**
 * ETag and If-Match (docs/contracts.md "Retries and concurrent writers"), on both document stores, with two tenants:
 * - `GET /:id` answers a strong `ETag` that changes with every change of the document, a platform balance move
 *   included, and never carries or depends on a field value (the caller sees no revision, hidden fields stay hidden);
 *   `If-None-Match` with it answers 304;
 * - `If-Match` on every by-id write route kind (PATCH, DELETE, PUT restore, DELETE destroy, the by-id special
 *   actions: an invoice's payment, a transaction's verify and abort): a stale tag answers 412 `precondition failed`
 *   and changes nothing (document, balances, change events); `*`, lists and weak tags as RFC 9110 says; concurrent
 *   writers with the same tag: exactly one wins;
 * - another tenant's id answers 404 whatever the tag, never 412.
 */
import { bootTenancy, ok, type Tenancy } from "../helpers/tenants";
import { sharedOutbox, type OutboxRecord } from "../../events/outbox";
import { WALLET_CURRENCY, walletIdOf } from "../../services/financial.service";
import type { HttpResult } from "../helpers/platform";
import { waitForValue } from "../helpers/wait";

jest.setTimeout(180_000);

const answer = (r: HttpResult) => ({ status: r.status, body: r.body });
const FAILED = { status: 412, body: { statusCode: 412, message: "precondition failed", error: "Precondition Failed" } };
const NOT_FOUND = { status: 404, body: { statusCode: 404, message: "document not found", error: "Not Found" } };
const STRONG = /^"[A-Za-z0-9_-]{27}"$/;

describe("ETag and If-Match", () => {
	let t: Tenancy;
	const note = async (token: string, body: Record<string, unknown> = {}) =>
		(await ok(t.as(token, "POST", "/content/notes", { title: "first", ...body }), "note")).data.id as string;
	const tagOf = async (token: string, path: string): Promise<string> => {
		const r = await t.as(token, "GET", path);
		expect(r.status).toBe(200);
		return r.headers.get("etag")!;
	};
	/** Change events appended since the platform started (the outbox itself is pruned as consumers pass records). */
	const appended: OutboxRecord[] = [];
	const eventsOf = async (id: string) => appended.filter((r) => r.event.id === id).length;

	beforeAll(async () => {
		t = await bootTenancy();
		sharedOutbox(t.p.cfg).on("appended", (recs: OutboxRecord[]) => appended.push(...recs));
		for (const tn of [t.a, t.b])
			for (const [action, object] of [
				["init", "financial:transactions"],
				["verify", "financial:transactions"],
				["payment", "financial:invoices"],
			])
				await t.grant(tn.admin.token, { subject: `@editor@${tn.domain}`, action, object });
		t.a.member.token = await t.login(t.a, t.a.member.username, t.a.member.password);
	}, 180_000);

	afterAll(async () => {
		await t?.cleanup();
	});

	test("GET answers a strong tag that changes with every write; If-None-Match answers 304 (lists, *, weak forms)", async () => {
		const id = await note(t.a.admin.token, { shares: [t.a.member.id] });
		const path = `/content/notes/${id}`;
		const first = await t.as(t.a.admin.token, "GET", path);
		const tag = first.headers.get("etag")!;
		expect(tag).toMatch(STRONG);
		// The revision behind it never leaves: not in the body, not queryable.
		expect(Object.keys(first.body.data).filter((k) => k.startsWith("_"))).toEqual([]);
		expect((await t.as(t.a.admin.token, "GET", `/content/notes?query=${encodeURIComponent(JSON.stringify({ _rev: { $exists: true } }))}`)).status).toBe(403);
		expect(await tagOf(t.a.admin.token, path)).toBe(tag);
		// Another caller who sees the document gets the same tag (a tag of the document, not of the caller).
		expect(await tagOf(t.a.member.token, path)).toBe(tag);

		for (const inm of [tag, `W/${tag}`, `"other", ${tag}`, "*"]) {
			const r = await t.as(t.a.admin.token, "GET", path, undefined, { "if-none-match": inm });
			expect(r.status).toBe(304);
			expect(r.text).toBe("");
			expect(r.headers.get("etag")).toBe(tag);
		}
		expect((await t.as(t.a.admin.token, "GET", path, undefined, { "if-none-match": '"other"' })).status).toBe(200);

		// Every write changes it, a write that sets a value back included (never an earlier tag again).
		const seen = new Set([tag]);
		for (const title of ["second", "first"]) {
			const r = await t.as(t.a.admin.token, "PATCH", path, { title });
			expect(r.status).toBe(200);
			const now = await tagOf(t.a.admin.token, path);
			// A write answers the document's new tag.
			expect(r.headers.get("etag")).toBe(now);
			expect(seen.has(now)).toBe(false);
			seen.add(now);
		}
		const stale = await t.as(t.a.admin.token, "GET", path, undefined, { "if-none-match": tag });
		expect(stale.status).toBe(200);
		expect(stale.body.data.title).toBe("first");
	});

	test("a stale If-Match on PATCH, DELETE, PUT restore and DELETE destroy answers 412 and changes nothing, no event", async () => {
		const id = await note(t.a.admin.token);
		const path = `/content/notes/${id}`;
		const old = await tagOf(t.a.admin.token, path);
		await ok(t.as(t.a.admin.token, "PATCH", path, { content: "by someone else" }), "other writer");
		const cur = await tagOf(t.a.admin.token, path);
		const events = await eventsOf(id);
		const doc = (await ok(t.as(t.a.admin.token, "GET", path), "get")).data;

		const im = (tag: string) => ({ "if-match": tag });
		expect(answer(await t.as(t.a.admin.token, "PATCH", path, { title: "lost update" }, im(old)))).toEqual(FAILED);
		expect(answer(await t.as(t.a.admin.token, "DELETE", path, undefined, im(old)))).toEqual(FAILED);
		expect(answer(await t.as(t.a.admin.token, "DELETE", `${path}/destroy`, undefined, im(old)))).toEqual(FAILED);
		// Weak tags never match If-Match (strong comparison), not even the current one.
		expect(answer(await t.as(t.a.admin.token, "PATCH", path, { title: "weak" }, im(`W/${cur}`)))).toEqual(FAILED);
		expect((await ok(t.as(t.a.admin.token, "GET", path), "get")).data).toEqual(doc);
		expect(await tagOf(t.a.admin.token, path)).toBe(cur);
		expect(await eventsOf(id)).toBe(events);

		// The current tag, alone or in a list, and `*` let the write through; each answer carries the new tag.
		const patched = await t.as(t.a.admin.token, "PATCH", path, { title: "mine" }, im(`"x", ${cur}`));
		expect(patched.status).toBe(200);
		expect(patched.body.data.title).toBe("mine");
		const starred = await t.as(t.a.admin.token, "PATCH", path, { title: "any" }, im("*"));
		expect(starred.status).toBe(200);
		const deleted = await t.as(t.a.admin.token, "DELETE", path, undefined, im(starred.headers.get("etag")!));
		expect(deleted.status).toBe(200);
		const gone = deleted.headers.get("etag")!;
		expect(gone).toMatch(STRONG);
		expect(await eventsOf(id)).toBe(events + 3);

		// Restore: the tag the DELETE answered; an earlier one is stale and the document stays deleted.
		expect(answer(await t.as(t.a.admin.token, "PUT", `${path}/restore`, undefined, im(starred.headers.get("etag")!)))).toEqual(FAILED);
		expect(answer(await t.as(t.a.admin.token, "GET", path))).toEqual(NOT_FOUND);
		const restored = await t.as(t.a.admin.token, "PUT", `${path}/restore`, undefined, im(gone));
		expect(restored.status).toBe(200);
		expect(await tagOf(t.a.admin.token, path)).toBe(restored.headers.get("etag"));
		// Destroy with the current tag.
		expect((await t.as(t.a.admin.token, "DELETE", `${path}/destroy`, undefined, im(restored.headers.get("etag")!))).status).toBe(200);
		expect(answer(await t.as(t.a.admin.token, "GET", path))).toEqual(NOT_FOUND);
	});

	test("malformed If-Match answers 400; another tenant's id answers 404 whatever the tag, never 412", async () => {
		const id = await note(t.a.admin.token);
		const path = `/content/notes/${id}`;
		const cur = await tagOf(t.a.admin.token, path);
		const msg = 'If-Match must be "*" or a list of entity tags, e.g. If-Match: "<ETag of a GET>"';
		for (const bad of ["abc", '"unterminated', `${cur} ${cur}`, '"a",,"b"'])
			expect(answer(await t.as(t.a.admin.token, "PATCH", path, { title: "x" }, { "if-match": bad }))).toEqual({
				status: 400,
				body: { statusCode: 400, message: msg, error: "Bad Request" },
			});
		expect(answer(await t.as(t.a.admin.token, "PATCH", path, { title: "x" }, { "if-match": `"${"a".repeat(3000)}"` }))).toEqual({
			status: 400,
			body: { statusCode: 400, message: "If-Match accepts at most 2048 characters", error: "Bad Request" },
		});
		expect(answer(await t.as(t.a.admin.token, "GET", path, undefined, { "if-none-match": "abc" }))).toEqual({
			status: 400,
			body: { statusCode: 400, message: 'If-None-Match must be "*" or a list of entity tags, e.g. If-None-Match: "<ETag of a GET>"', error: "Bad Request" },
		});
		for (const tag of [cur, '"stale"', "*"]) {
			expect(answer(await t.as(t.b.admin.token, "PATCH", path, { title: "b" }, { "if-match": tag }))).toEqual(NOT_FOUND);
			expect(answer(await t.as(t.b.admin.token, "DELETE", path, undefined, { "if-match": tag }))).toEqual(NOT_FOUND);
			expect(answer(await t.as(t.b.admin.token, "GET", path, undefined, { "if-none-match": tag }))).toEqual(NOT_FOUND);
		}
		expect(await tagOf(t.a.admin.token, path)).toBe(cur);
	});

	test("concurrent writers with the same If-Match: exactly one wins, the others answer 412", async () => {
		const id = await note(t.a.admin.token);
		const path = `/content/notes/${id}`;
		const cur = await tagOf(t.a.admin.token, path);
		const events = await eventsOf(id);
		const results = await Promise.all(Array.from({ length: 6 }, (_v, i) => t.as(t.a.admin.token, "PATCH", path, { title: `writer ${i}` }, { "if-match": cur })));
		expect(results.map((r) => r.status).sort()).toEqual([200, 412, 412, 412, 412, 412]);
		const winner = results.find((r) => r.status === 200)!;
		expect((await ok(t.as(t.a.admin.token, "GET", path), "get")).data.title).toBe(winner.body.data.title);
		expect(await eventsOf(id)).toBe(events + 1);
	});

	test("a field-limited caller: the tag reveals no value (same tag as anyone's), and changes with a hidden field's change", async () => {
		await t.grant(t.a.admin.token, { subject: t.a.limited.subject, action: "read", object: "content:notes", field: ["title"] });
		const limited = await t.login(t.a, t.a.limited.username, t.a.limited.password);
		const id = await note(t.a.admin.token, { content: "secret", shares: [t.a.limited.id] });
		const path = `/content/notes/${id}`;
		const seen = await t.as(limited, "GET", path);
		expect(seen.status).toBe(200);
		expect(seen.body.data.content).toBeUndefined();
		expect(seen.headers.get("etag")).toMatch(STRONG);
		expect(seen.headers.get("etag")).toBe(await tagOf(t.a.admin.token, path));
		// Decided (docs/api.md "ETag and If-Match"): a change of a field it cannot read changes its tag (the document
		// changed), as the contract says; the tag is a digest of the id and a random revision, never of a value.
		await ok(t.as(t.a.admin.token, "PATCH", path, { content: "other secret" }), "hidden change");
		expect((await t.as(limited, "GET", path, undefined, { "if-none-match": seen.headers.get("etag")! })).status).toBe(200);
		expect(await tagOf(limited, path)).toBe(await tagOf(t.a.admin.token, path));
	});

	test("saga commit and abort honour If-Match; a compensated write gets a tag of its own", async () => {
		const id = await note(t.a.admin.token, { title: "before the saga" });
		const path = `/content/notes/${id}`;
		const pre = await tagOf(t.a.admin.token, path);
		const saga = (await ok(t.as(t.a.admin.token, "POST", "/essential/sagas/start", { ttl: 60 }), "saga")).data.id as string;
		const staged = await t.as(t.a.admin.token, "PATCH", path, { title: "in the saga" }, { "x-saga-session": saga, "if-match": pre });
		expect(staged.status).toBe(200);
		const mid = await tagOf(t.a.admin.token, path);
		expect(staged.headers.get("etag")).toBe(mid);
		const spath = `/essential/sagas/${saga}`;
		const sagaTag = await tagOf(t.a.admin.token, spath);
		for (const op of ["commit", "abort"]) expect(answer(await t.as(t.a.admin.token, "GET", `${spath}/${op}`, undefined, { "if-match": '"stale"' }))).toEqual(FAILED);
		expect(answer(await t.as(t.b.admin.token, "GET", `${spath}/abort`, undefined, { "if-match": sagaTag }))).toEqual(NOT_FOUND);
		expect((await ok(t.as(t.a.admin.token, "GET", spath), "saga")).data.state).toBe("AWAITING");
		expect((await ok(t.as(t.a.admin.token, "GET", `${spath}/abort`, undefined, { "if-match": sagaTag }), "abort")).data.state).toBe("ABORTED");
		// The staged write is undone (its image holds the revision it stored), and the document's tag is a new one.
		const back = await t.as(t.a.admin.token, "GET", path);
		expect(back.body.data.title).toBe("before the saga");
		expect([pre, mid]).not.toContain(back.headers.get("etag"));
	});

	test("a platform balance move changes the wallet's tag; a payment and a verify honour If-Match", async () => {
		const fin = () => t.p.broker.getLocalService("financial") as any;
		const wallets = () => fin().collectionStore("wallets");
		const W = { aa: walletIdOf(t.a.admin.id), am: walletIdOf(t.a.member.id) };
		await waitForValue("the platform's wallets", async () => (await Promise.all(Object.values(W).map((id) => wallets().findOne({ id })))).every(Boolean), 30_000);
		const balance = async (id: string) => (((await wallets().findOne({ id })) as any)?.balance as number | undefined) ?? 0;
		const wpath = `/financial/wallets/${W.am}`;
		const before = await tagOf(t.a.member.token, wpath);

		// A deposit moves the balance by the platform's own write (no PATCH): the tag changes.
		const tx = (await ok(t.as(t.a.admin.token, "POST", "/financial/transactions/init", { type: "DEPOSIT", amount: 500, payees: [{ wallet: W.am, amount: 500 }] }), "deposit")).data;
		const moved = await tagOf(t.a.member.token, wpath);
		expect(moved).not.toBe(before);
		expect((await t.as(t.a.member.token, "GET", wpath, undefined, { "if-none-match": before })).status).toBe(200);

		// Verify, by id: a stale tag changes nothing (still PENDING, balance credited only once); the current one verifies.
		const tpath = `/financial/transactions/${tx.id}`;
		const txTag = await tagOf(t.a.admin.token, tpath);
		expect(answer(await t.as(t.a.admin.token, "GET", `${tpath}/verify`, undefined, { "if-match": '"stale"' }))).toEqual(FAILED);
		expect((await ok(t.as(t.a.admin.token, "GET", tpath), "tx")).data.state).toBe("PENDING");
		expect((await ok(t.as(t.a.admin.token, "GET", `${tpath}/verify`, undefined, { "if-match": txTag }), "verify")).data.state).toBe("VERIFIED");
		// Another tenant's transaction id: 404, never 412.
		expect(answer(await t.as(t.b.admin.token, "GET", `${tpath}/abort`, undefined, { "if-match": '"stale"' }))).toEqual(NOT_FOUND);

		// The payer pins the invoice it read: the owner changes it in between (any field), the payment answers 412 and
		// nothing is paid or moved; with the fresh tag it pays.
		const inv = (await ok(t.as(t.a.admin.token, "POST", "/financial/invoices", { amount: 120, currency: WALLET_CURRENCY, status: "ISSUED", shares: [t.a.member.id] }), "invoice"))
			.data.id;
		const ipath = `/financial/invoices/${inv}`;
		const read = await tagOf(t.a.member.token, ipath);
		await ok(t.as(t.a.admin.token, "PATCH", ipath, { description: "terms changed" }), "owner edit");
		const events = await eventsOf(inv);
		const [am0, aa0] = [await balance(W.am), await balance(W.aa)];
		expect(answer(await t.as(t.a.member.token, "POST", `${ipath}/payment`, { wallet: W.am }, { "if-match": read }))).toEqual(FAILED);
		expect((await ok(t.as(t.a.member.token, "GET", ipath), "invoice")).data.status).toBe("ISSUED");
		expect([await balance(W.am), await balance(W.aa)]).toEqual([am0, aa0]);
		expect(await eventsOf(inv)).toBe(events);
		const fresh = await tagOf(t.a.member.token, ipath);
		const paid = await t.as(t.a.member.token, "POST", `${ipath}/payment`, { wallet: W.am }, { "if-match": fresh });
		expect(paid.status).toBe(200);
		expect(paid.body.data.status).toBe("PAID");
		expect([await balance(W.am), await balance(W.aa)]).toEqual([am0 - 120, aa0 + 120]);
		// The payer's wallet moved: its tag changed again.
		expect(await tagOf(t.a.member.token, wpath)).not.toBe(moved);
		// Tenant b cannot pay (or probe) tenant a's invoice: 404 whatever the tag.
		expect(answer(await t.as(t.b.admin.token, "POST", `${ipath}/payment`, { wallet: walletIdOf(t.b.admin.id) }, { "if-match": fresh }))).toEqual(NOT_FOUND);
	});
});
