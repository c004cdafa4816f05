/**
 * Saga invariants, on both document stores (docs/contracts.md "Sagas", docs/sagas.md):
 * - compensation never writes a platform-managed value back, and any change of a staged document after its stage,
 *   by anyone (a balance move included), is a conflict: aborting a saga never duplicates money;
 * - `add` refuses a `req` nested beyond the platform's depth limit with a 400 (never a 500);
 * - a raw `POST /essential/sagas` cannot set what the saga operations manage (`state` other than AWAITING,
 *   `expires_at`), and its `ttl` is 5 to 900 like `start`'s.
 */
import { randomUUID } from "crypto";
import { bootTenancy, ok, type Tenancy } from "../helpers/tenants";
import { withStatusProbe } from "../helpers/status-probe";
import { walletIdOf } from "../../services/financial.service";
import { waitForValue } from "../helpers/wait";

jest.setTimeout(120_000);

const H = (saga: string) => ({ "x-saga-session": saga });

describe("sagas", () => {
	let t: Tenancy;

	beforeAll(async () => {
		t = await bootTenancy();
	}, 90_000);
	afterAll(async () => {
		await t?.cleanup();
	});
	withStatusProbe(() => t.p.url);

	const wallets = () => (t.p.broker.getLocalService("financial") as any).collectionStore("wallets");
	/** A wallet's balance, null when the wallet is gone. */
	const balance = async (id: string): Promise<number | null> => (await wallets().findOne({ id }))?.balance ?? null;
	const walletOf = (user: string) => waitForValue(`the wallet of ${user}`, async () => wallets().findOne({ id: walletIdOf(user) }));

	/** The tenant admin (manage on financial:wallets) puts money into a wallet: DEPOSIT, verified. */
	async function deposit(wallet: string, amount: number) {
		const tx = await ok(t.as(t.a.admin.token, "POST", "/financial/transactions/init", { type: "DEPOSIT", amount, payees: [{ wallet, amount }] }), "deposit");
		await ok(t.as(t.a.admin.token, "GET", `/financial/transactions/${tx.data.id}/verify`), "verify deposit");
	}

	test("abort after a balance move outside the saga: the wallet is a conflict, money is conserved", async () => {
		const { a } = t;
		// An ordinary user: write on wallets, saga start/abort, transfer (init, verify), reading its stages.
		for (const [action, object] of [
			["read", "financial:wallets"],
			["write", "financial:wallets"],
			["start", "essential:sagas"],
			["abort", "essential:sagas"],
			["read", "essential:saga-stages"],
			["init", "financial:transactions"],
			["verify", "financial:transactions"],
		])
			await t.grant(a.admin.token, { subject: a.limited.subject, action, object });
		const mine = (await walletOf(a.limited.id)).id as string;
		const theirs = (await walletOf(a.member.id)).id as string;
		await deposit(mine, 200);
		await deposit(theirs, 100);
		expect([await balance(mine), await balance(theirs)]).toEqual([200, 100]);
		const total = (await balance(mine))! + (await balance(theirs))!;

		const saga = (await ok(t.as(a.limited.token, "POST", "/essential/sagas/start", { ttl: 60 }), "start")).data;
		const patched = await ok(t.as(a.limited.token, "PATCH", `/financial/wallets/${mine}`, { description: "travel money" }, H(saga.id)), "staged patch");
		expect(patched.data).toMatchObject({ id: mine, description: "travel money", balance: 200 });

		// Outside the saga: 100 to the member, verified.
		const tx = await ok(
			t.as(a.limited.token, "POST", "/financial/transactions/init", { amount: 100, payers: [{ wallet: mine, amount: 100 }], payees: [{ wallet: theirs, amount: 100 }] }),
			"transfer",
		);
		await ok(t.as(a.limited.token, "GET", `/financial/transactions/${tx.data.id}/verify`), "verify transfer");
		expect([await balance(mine), await balance(theirs)]).toEqual([100, 200]);

		const aborted = await t.as(a.limited.token, "GET", `/essential/sagas/${saga.id}/abort`);
		expect(aborted.status).toBe(200);
		expect(aborted.body.data).toMatchObject({ id: saga.id, state: "ABORTED", abort_reason: "abort" });

		// No money made: the wallet was changed after the stage (its balance moved), so it is left as it is.
		expect([await balance(mine), await balance(theirs)]).toEqual([100, 200]);
		expect((await balance(mine))! + (await balance(theirs))!).toBe(total);
		const w = await ok(t.as(a.limited.token, "GET", `/financial/wallets/${mine}`), "wallet");
		expect(w.data).toMatchObject({ balance: 100, description: "travel money" });
		// The contract's report of a conflict: the stage says so, and the rest of the saga went on.
		const q = encodeURIComponent(JSON.stringify({ saga: saga.id }));
		const stages = await ok(t.as(a.limited.token, "GET", `/essential/saga-stages?query=${q}`), "stages");
		expect(stages.total).toBe(1);
		expect(stages.items[0]).toMatchObject({ saga: saga.id, bucket: "financial/wallets", action: "FIND_ONE_AND_UPDATE", state: "conflict", conflict: true });
		// Repeating the abort answers the same and moves nothing.
		expect((await t.as(a.limited.token, "GET", `/essential/sagas/${saga.id}/abort`)).body.data).toEqual(aborted.body.data);
		expect([await balance(mine), await balance(theirs)]).toEqual([100, 200]);
	});

	test("abort with no change after the stage puts the client's fields back and leaves the balance to the platform", async () => {
		const { a } = t;
		for (const action of ["start", "abort"]) await t.grant(a.admin.token, { subject: a.member.subject, action, object: "essential:sagas" });
		const mine = (await walletOf(a.member.id)).id as string;
		const saga = (await ok(t.as(a.member.token, "POST", "/essential/sagas/start", { ttl: 60 }), "start")).data;
		const before = (await ok(t.as(a.member.token, "GET", `/financial/wallets/${mine}`), "wallet")).data;
		await ok(t.as(a.member.token, "PATCH", `/financial/wallets/${mine}`, { description: "in a saga", tags: ["x"] }, H(saga.id)), "staged patch");
		const aborted = await ok(t.as(a.member.token, "GET", `/essential/sagas/${saga.id}/abort`), "abort");
		expect(aborted.data.state).toBe("ABORTED");
		const after = (await ok(t.as(a.member.token, "GET", `/financial/wallets/${mine}`), "wallet")).data;
		expect(after).toEqual(before);
		const q = encodeURIComponent(JSON.stringify({ saga: saga.id }));
		const stages = await ok(t.as(a.member.token, "GET", `/essential/saga-stages?query=${q}`), "stages");
		expect(stages.items.map((s: any) => [s.state, s.conflict])).toEqual([["compensated", false]]);
	});

	test("a document created in the saga and credited since is not destroyed by the abort", async () => {
		const { a } = t;
		const saga = (await ok(t.as(a.admin.token, "POST", "/essential/sagas/start", { ttl: 60 }), "start")).data;
		const w = (await ok(t.as(a.admin.token, "POST", "/financial/wallets", { currency: "USD" }, H(saga.id)), "staged wallet")).data;
		await deposit(w.id, 50);
		expect(await balance(w.id)).toBe(50);
		await ok(t.as(a.admin.token, "GET", `/essential/sagas/${saga.id}/abort`), "abort");
		expect(await balance(w.id)).toBe(50);
		const q = encodeURIComponent(JSON.stringify({ saga: saga.id }));
		const stages = await ok(t.as(a.admin.token, "GET", `/essential/saga-stages?query=${q}`), "stages");
		expect(stages.items.map((s: any) => [s.action, s.state, s.conflict])).toEqual([["INSERT_MANY", "conflict", true]]);
	});

	test("every write kind untouched since its stage is undone exactly (no false conflict on this store)", async () => {
		const token = t.a.admin.token;
		const mk = async (n: number) => (await ok(t.as(token, "POST", "/content/notes", { title: `kind-${n}`, ref: `kind-${n}` }), "note")).data;
		const pre = [await mk(1), await mk(2), await mk(3), await mk(4), await mk(5)];
		await ok(t.as(token, "DELETE", `/content/notes/${pre[3].id}`), "delete before");
		const read = async (id: string) => {
			const r = await t.as(token, "GET", `/content/notes/${id}`, undefined, { "x-exclude-soft-delete-query": "1" });
			return r.status === 200 ? r.body.data : null;
		};
		const images = await Promise.all(pre.map((d) => read(d.id)));
		const saga = (await ok(t.as(token, "POST", "/essential/sagas/start", { ttl: 60 }), "start")).data;
		const S = H(saga.id);
		const created = (await ok(t.as(token, "POST", "/content/notes", { title: "created", ref: `made` }, S), "create")).data;
		const bulk = (await ok(t.as(token, "POST", "/content/notes/bulk", { items: [{ title: "b1" }, { title: "b2", props: { a: { b: [1, "x"] } } }] }, S), "bulk create")).items;
		await ok(t.as(token, "PATCH", `/content/notes/${pre[0].id}`, { content: "changed", ref: null, props: { z: 1, a: 2 }, tags: ["t"] }, S), "patch");
		const q = encodeURIComponent(JSON.stringify({ id: { $in: [pre[1].id, pre[2].id] } }));
		expect((await ok(t.as(token, "PATCH", `/content/notes/bulk?query=${q}`, { content: "bulk" }, S), "bulk patch")).total).toBe(2);
		await ok(t.as(token, "DELETE", `/content/notes/${pre[1].id}`, undefined, S), "delete");
		await ok(t.as(token, "PUT", `/content/notes/${pre[3].id}/restore`, undefined, S), "restore");
		await ok(t.as(token, "DELETE", `/content/notes/${pre[4].id}/destroy`, undefined, S), "destroy");
		await ok(t.as(token, "GET", `/essential/sagas/${saga.id}/abort`), "abort");
		for (const id of [created.id, ...bulk.map((d: any) => d.id)]) expect(await read(id)).toBeNull();
		expect(await Promise.all(pre.map((d) => read(d.id)))).toEqual(images);
		const sq = encodeURIComponent(JSON.stringify({ saga: saga.id }));
		const stages = await ok(t.as(token, "GET", `/essential/saga-stages?query=${sq}&pagination=${encodeURIComponent(JSON.stringify({ limit: 20 }))}`), "stages");
		expect(stages.items.map((s: any) => s.state)).toEqual(Array(7).fill("compensated"));
		// The refs came back with their documents: they are taken again, the one of the undone create is free.
		expect((await t.as(token, "POST", "/content/notes", { title: "again", ref: `kind-1` })).status).toBe(409);
		expect((await t.as(token, "POST", "/content/notes", { title: "again", ref: `made` })).status).toBe(200);
	});

	test("add: a req nested 10 000 levels deep answers 400 naming the limit", async () => {
		const saga = (await ok(t.as(t.a.admin.token, "POST", "/essential/sagas/start", { ttl: 60 }), "start")).data;
		const depth = 10_000;
		const req = '{"a":'.repeat(depth) + "1" + "}".repeat(depth);
		const raw = `{"saga":"${saga.id}","bucket":"content/notes","action":"FIND","req":${req}}`;
		const r = await t.p.http("POST", "/essential/sagas/add", { token: t.a.admin.token, raw });
		expect(r.body).toEqual({ statusCode: 400, message: "req is too deeply nested (at most 16 levels)", error: "Bad Request" });
		// Arrays count as levels too, and res has the same limit.
		const arr = "[".repeat(depth) + "]".repeat(depth);
		const r2 = await t.p.http("POST", "/essential/sagas/add", { token: t.a.admin.token, raw: `{"saga":"${saga.id}","bucket":"content/notes","action":"FIND","req":{"x":${arr}}}` });
		expect(r2.body).toEqual({ statusCode: 400, message: "req is too deeply nested (at most 16 levels)", error: "Bad Request" });
		const r3 = await t.p.http("POST", "/essential/sagas/add", {
			token: t.a.admin.token,
			raw: `{"saga":"${saga.id}","bucket":"content/notes","action":"FIND","req":{},"res":${req}}`,
		});
		expect(r3.body).toEqual({ statusCode: 400, message: "res is too deeply nested (at most 16 levels)", error: "Bad Request" });
		// Within the limit (operators kept as text), the stage is recorded.
		const fine = await t.as(t.a.admin.token, "POST", "/essential/sagas/add", { saga: saga.id, bucket: "content/notes", action: "FIND", req: { query: { n: { $gt: 1 } } } });
		expect(fine.status).toBe(200);
		expect(fine.body.data).toMatchObject({ state: "external", saga: saga.id });
	});

	test("raw POST /essential/sagas: state other than AWAITING, expires_at and a ttl outside 5-900 answer 400", async () => {
		const token = t.a.admin.token;
		const base = { ttl: 60, job: randomUUID(), state: "AWAITING", session: "abcdef" };
		const bad = (message: string) => ({ statusCode: 400, message, error: "Bad Request" });
		const cases = [
			[{ ...base, state: "COMMITTED" }, "state must be AWAITING on create (a saga's state moves only through start, commit, abort and expiry)"],
			[{ ...base, state: "ABORTED" }, "state must be AWAITING on create (a saga's state moves only through start, commit, abort and expiry)"],
			[{ ...base, expires_at: "2099-01-01T00:00:00.000Z" }, "expires_at is set by the platform"],
			[{ ...base, committed_at: "2099-01-01T00:00:00.000Z" }, "committed_at is set by the platform"],
			[{ ...base, ttl: 0 }, "ttl must be an integer between 5 and 900"],
			[{ ...base, ttl: 4 }, "ttl must be an integer between 5 and 900"],
			[{ ...base, ttl: 901 }, "ttl must be an integer between 5 and 900"],
			[{ ...base, ttl: 86_400_000 }, "ttl must be an integer between 5 and 900"],
			[{ ...base, ttl: -5 }, "ttl must be an integer between 5 and 900"],
		] as const;
		const got = [];
		for (const [body] of cases) got.push([body, (await t.as(token, "POST", "/essential/sagas", body)).body]);
		expect(got).toEqual(cases.map(([body, message]) => [body, bad(message)]));
		// Bulk create keeps the same rules, naming the item.
		const bulk = await t.as(token, "POST", "/essential/sagas/bulk", { items: [base, { ...base, ttl: 901 }] });
		expect(bulk.body).toEqual(bad("ttl must be an integer between 5 and 900"));
		// A valid raw create: AWAITING, expires_at = now + ttl.
		const made = await t.as(token, "POST", "/essential/sagas", base);
		expect(made.status).toBe(200);
		expect(made.body.data).toMatchObject({ state: "AWAITING", ttl: 60 });
		expect(Math.abs(Date.parse(made.body.data.expires_at) - (Date.now() + 60_000))).toBeLessThan(5_000);
		// A patch still cannot move its state or lifetime.
		const p = await t.as(token, "PATCH", `/essential/sagas/${made.body.data.id}`, { expires_at: "2099-01-01T00:00:00.000Z" });
		expect(p.body).toEqual(bad("expires_at is set by the platform"));
	});
});
