/**
 * Money stays where the contract puts it (docs/contracts.md "Financial transactions and payments", "Tenants"), on both
 * document stores, with two tenants set up the operator's way (test/helpers/tenants.ts):
 * - payments, overdrafts and concurrent transfers answer without a 500 from the unit of work;
 * - every wallet a transaction touches is in the caller's view: another tenant's or the operator's is 404;
 * - `wallets.user` names a user of the caller's tenant, and payments and `ensureWallet` use the platform's wallet of
 *   the user, never one that merely names it;
 * - a cancelled invoice is not paid, the payer may pin the amount it read, currencies never mix, `PAID` is the
 *   platform's to set.
 */
import { bootTenancy, ok, type Tenancy } from "../helpers/tenants";
import { withStatusProbe } from "../helpers/status-probe";
import { WALLET_CURRENCY, walletIdOf } from "../../services/financial.service";
import { walletHooks } from "../../services/financial/wallets";
import { platformDoc, type CollectionHooks } from "../../engine/collection.mixin";
import type { HttpResult } from "../helpers/platform";
import type { StoredDoc } from "../../stores";
import { waitForValue } from "../helpers/wait";

jest.setTimeout(180_000);

const NAMES: Record<number, string> = { 400: "Bad Request", 403: "Forbidden", 404: "Not Found", 409: "Conflict", 412: "Precondition Failed" };
const answer = (r: HttpResult) => ({ status: r.status, body: r.body });
const refused = (status: number, message: string) => ({ status, body: { statusCode: status, message, error: NAMES[status] } });

describe("financial invariants", () => {
	let t: Tenancy;
	/** Platform wallets: a/b admin and member, and the operator's root user. */
	const W = { aa: "", am: "", ba: "", bm: "", root: "" };

	const fin = () => t.p.broker.getLocalService("financial") as any;
	const wallets = () => fin().collectionStore("wallets");
	const balance = async (id: string): Promise<number> => (((await wallets().findOne({ id })) as StoredDoc | null)?.balance as number | undefined) ?? 0;
	const balances = (ids: string[]) => Promise.all(ids.map(balance));
	const init = (token: string, body: unknown) => t.as(token, "POST", "/financial/transactions/init", body);
	const pay = (token: string, invoice: string, body: unknown) => t.as(token, "POST", `/financial/invoices/${invoice}/payment`, body);

	async function deposit(token: string, wallet: string, amount: number): Promise<void> {
		const tx = (await ok(init(token, { type: "DEPOSIT", amount, payees: [{ wallet, amount }] }), `deposit ${amount}`)).data;
		expect((await ok(t.as(token, "GET", `/financial/transactions/${tx.id}/verify`), "verify")).data.state).toBe("VERIFIED");
	}

	async function invoice(body: Record<string, unknown>): Promise<string> {
		return (await ok(t.as(t.a.admin.token, "POST", "/financial/invoices", { currency: WALLET_CURRENCY, status: "ISSUED", shares: [t.a.member.id], ...body }), "invoice")).data.id;
	}

	beforeAll(async () => {
		t = await bootTenancy();
		Object.assign(W, {
			aa: walletIdOf(t.a.admin.id),
			am: walletIdOf(t.a.member.id),
			ba: walletIdOf(t.b.admin.id),
			bm: walletIdOf(t.b.member.id),
			root: walletIdOf(t.p.root.user_id),
		});
		await waitForValue("the platform's wallets", async () => (await Promise.all(Object.values(W).map((id) => wallets().findOne({ id })))).every(Boolean), 30_000);
		// Members of both tenants may start, verify and pay (their admin grants it within its domain).
		for (const tn of [t.a, t.b])
			for (const [action, object] of [
				["init", "financial:transactions"],
				["verify", "financial:transactions"],
				["payment", "financial:invoices"],
			])
				await t.grant(tn.admin.token, { subject: `@editor@${tn.domain}`, action, object });
		t.a.member.token = await t.login(t.a, t.a.member.username, t.a.member.password);
		t.b.member.token = await t.login(t.b, t.b.member.username, t.b.member.password);
	}, 180_000);

	afterAll(async () => {
		await t?.cleanup();
	});
	withStatusProbe(() => t.p.url);

	test("payments, overdrafts and concurrent transfers answer as on every store (no 500)", async () => {
		await deposit(t.a.admin.token, W.am, 300);
		const [am0, aa0] = await balances([W.am, W.aa]);
		const id = await invoice({ amount: 120 });
		const paid = await pay(t.a.member.token, id, { wallet: W.am });
		expect(paid.status).toBe(200);
		expect(paid.body.data).toMatchObject({ id, status: "PAID", transaction: expect.stringMatching(/^[0-9a-f]{24}$/) });
		expect(Date.parse(paid.body.data.paid_at)).toBeGreaterThan(0);
		expect(await balances([W.am, W.aa])).toEqual([am0 - 120, aa0 + 120]);

		const over = await init(t.a.member.token, { amount: 10_000, payers: [{ wallet: W.am, amount: 10_000 }], payees: [{ wallet: W.aa, amount: 10_000 }] });
		expect(answer(over)).toEqual(refused(409, "insufficient balance"));
		// An invoice the payer cannot afford: 409, and it stays unpaid.
		const dear = await invoice({ amount: 10_000 });
		expect(answer(await pay(t.a.member.token, dear, { wallet: W.am }))).toEqual(refused(409, "insufficient balance"));
		expect((await ok(t.as(t.a.admin.token, "GET", `/financial/invoices/${dear}`), "get")).data).toMatchObject({ status: "ISSUED" });
		expect((await ok(t.as(t.a.admin.token, "GET", `/financial/invoices/${dear}`), "get")).data.paid_at).toBeUndefined();
		expect(await balances([W.am, W.aa])).toEqual([am0 - 120, aa0 + 120]);

		// 180 left: of 8 concurrent transfers of 30, exactly 6 fit; the others answer 409 and change nothing.
		const left = await balance(W.am);
		const fit = Math.floor(left / 30);
		const results = await Promise.all(
			Array.from({ length: fit + 2 }, () => init(t.a.member.token, { amount: 30, payers: [{ wallet: W.am, amount: 30 }], payees: [{ wallet: W.aa, amount: 30 }] })),
		);
		expect(results.map((r) => r.status).sort()).toEqual([...Array(fit).fill(200), 409, 409]);
		for (const r of results.filter((x) => x.status === 409)) expect(r.body).toEqual({ statusCode: 409, message: "insufficient balance", error: "Conflict" });
		for (const r of results.filter((x) => x.status === 200))
			expect((await ok(t.as(t.a.member.token, "GET", `/financial/transactions/${r.body.data.id}/verify`), "verify")).data.state).toBe("VERIFIED");
		expect(await balances([W.am, W.aa])).toEqual([left - 30 * fit, aa0 + 120 + 30 * fit]);
	});

	test("a transaction reaches only wallets of the caller's view: another tenant's and the operator's answer 404, nothing moves", async () => {
		await deposit(t.a.admin.token, W.am, 50);
		const watched = [W.am, W.aa, W.ba, W.bm, W.root];
		const before = await balances(watched);
		for (const foreign of [W.bm, W.ba, W.root]) {
			// A's admin holds manage on wallets, yet a DEPOSIT into a wallet it cannot GET is a 404, as the GET is.
			expect(answer(await t.as(t.a.admin.token, "GET", `/financial/wallets/${foreign}`, undefined, { "x-zone": "own,share,group,client" }))).toEqual(
				refused(404, "document not found"),
			);
			expect(answer(await init(t.a.admin.token, { type: "DEPOSIT", amount: 1_000_000, payees: [{ wallet: foreign, amount: 1_000_000 }] }))).toEqual(
				refused(404, `wallet ${foreign} not found`),
			);
			expect(answer(await init(t.a.admin.token, { type: "WITHDRAW", amount: 1, payers: [{ wallet: foreign, amount: 1 }] }))).toEqual(refused(404, `wallet ${foreign} not found`));
			expect(answer(await init(t.a.member.token, { amount: 5, payers: [{ wallet: W.am, amount: 5 }], payees: [{ wallet: foreign, amount: 5 }] }))).toEqual(
				refused(404, `wallet ${foreign} not found`),
			);
			// One foreign payee among wallets of the tenant: the whole transaction is refused.
			expect(
				answer(
					await init(t.a.admin.token, {
						type: "DEPOSIT",
						amount: 3,
						payees: [
							{ wallet: W.aa, amount: 1 },
							{ wallet: foreign, amount: 1 },
							{ wallet: W.am, amount: 1 },
						],
					}),
				),
			).toEqual(refused(404, `wallet ${foreign} not found`));
		}
		expect(await balances(watched)).toEqual(before);
		// Within the tenant: the admin deposits into its member's wallet, the member pays its admin.
		await deposit(t.a.admin.token, W.am, 7);
		const tx = await init(t.a.member.token, { amount: 7, payers: [{ wallet: W.am, amount: 7 }], payees: [{ wallet: W.aa, amount: 7 }] });
		expect(tx.status).toBe(200);
		expect(await balances(watched)).toEqual([before[0], before[1] + 7, ...before.slice(2)]);
	});

	test("wallets.user names a user of the caller's tenant: another tenant's user, a client or an unknown id answer 400", async () => {
		const mine = await t.as(t.b.admin.token, "POST", "/financial/wallets", { user: t.b.member.id, currency: WALLET_CURRENCY });
		expect(mine.status).toBe(200);
		for (const id of [t.a.member.id, t.a.admin.id, t.p.root.user_id, t.b.client.id, "0123456789abcdef01234567"]) {
			const msg = `user: ${id} is not a user of this tenant`;
			expect(answer(await t.as(t.b.admin.token, "POST", "/financial/wallets", { user: id, currency: WALLET_CURRENCY }))).toEqual(refused(400, msg));
			expect(answer(await t.as(t.b.admin.token, "POST", "/financial/wallets/bulk", { items: [{ user: t.b.admin.id }, { user: id }] }))).toEqual(refused(400, msg));
			expect(answer(await t.as(t.b.admin.token, "PATCH", `/financial/wallets/${mine.body.data.id}`, { user: id }))).toEqual(refused(400, msg));
			expect(answer(await t.as(t.b.admin.token, "PATCH", "/financial/wallets/bulk", { user: id }))).toEqual(refused(400, msg));
		}
		const planted = await wallets().count({ user: { $in: [t.a.member.id, t.a.admin.id, t.p.root.user_id] }, "clients.0": t.b.client.id });
		expect(planted).toBe(0);
	});

	test("a payment credits the platform's wallet of the invoice's owner, never one that names the owner; ensureWallet too", async () => {
		// One wallet planted in the store before the rule (lowest id: read first), one made in-tenant by the member.
		const legacy = platformDoc({ user: t.a.admin.id, currency: WALLET_CURRENCY, balance: 0 }, { owner: t.b.admin.id, cid: t.b.client.id });
		legacy.id = "000000000000000000000001";
		await wallets().insert(legacy);
		const own = await ok(t.as(t.a.member.token, "POST", "/financial/wallets", { user: t.a.admin.id, currency: WALLET_CURRENCY }), "in-tenant wallet");
		await deposit(t.a.admin.token, W.aa, 1);
		await deposit(t.a.admin.token, W.am, 40);
		const [am0, aa0] = await balances([W.am, W.aa]);
		const id = await invoice({ amount: 40 });
		expect((await pay(t.a.member.token, id, { wallet: W.am })).status).toBe(200);
		expect(await balances([W.am, W.aa, legacy.id, own.data.id])).toEqual([am0 - 40, aa0 + 40, 0, 0]);

		// A user whose creation is delivered after a wallet naming it was planted still gets its own wallet.
		const user = "0000000000000000000000ff";
		const planted = platformDoc({ user, currency: WALLET_CURRENCY, balance: 0 }, { owner: t.b.admin.id, cid: t.b.client.id });
		planted.id = "000000000000000000000002";
		await wallets().insert(planted);
		const made = await fin().ensureWallet({ seq: 0, event: { topic: "identity.users", op: "c", id: user, after: { clients: [t.a.client.id] } }, clients: [t.a.client.id] });
		expect(made).toMatchObject({ id: walletIdOf(user), user, owner: user, clients: [t.a.client.id], balance: 0 });
		expect(await wallets().findOne({ id: walletIdOf(user) })).toMatchObject({ user, owner: user });
	});

	test("a CANCELLED invoice is not paid: 409, nothing moves", async () => {
		await deposit(t.a.admin.token, W.am, 25);
		const [am0, aa0] = await balances([W.am, W.aa]);
		const created = await invoice({ amount: 25, status: "CANCELLED" });
		expect(answer(await pay(t.a.member.token, created, { wallet: W.am }))).toEqual(refused(409, `invoice ${created} is cancelled`));
		const issued = await invoice({ amount: 25 });
		await ok(t.as(t.a.admin.token, "PATCH", `/financial/invoices/${issued}`, { status: "CANCELLED" }), "cancel");
		expect(answer(await pay(t.a.member.token, issued, { wallet: W.am }))).toEqual(refused(409, `invoice ${issued} is cancelled`));
		expect(await balances([W.am, W.aa])).toEqual([am0, aa0]);
		expect((await ok(t.as(t.a.admin.token, "GET", `/financial/invoices/${issued}`), "get")).data).toMatchObject({ status: "CANCELLED" });
	});

	test("the payer pins the amount it read: a different amount answers 409 and nothing moves; the same amount pays", async () => {
		await deposit(t.a.admin.token, W.am, 500);
		const [am0, aa0] = await balances([W.am, W.aa]);
		const id = await invoice({ amount: 100 });
		const read = (await ok(t.as(t.a.member.token, "GET", `/financial/invoices/${id}`), "read")).data.amount;
		// The owner raises the amount between the payer's read and its payment.
		await ok(t.as(t.a.admin.token, "PATCH", `/financial/invoices/${id}`, { amount: 450 }), "raise");
		expect(answer(await pay(t.a.member.token, id, { wallet: W.am, amount: read }))).toEqual(refused(409, `invoice ${id} amount is 450, not 100`));
		expect(await balances([W.am, W.aa])).toEqual([am0, aa0]);
		for (const amount of [0, -5, 1.5, "450"])
			expect(answer(await pay(t.a.member.token, id, { wallet: W.am, amount }))).toEqual(refused(400, "amount must be a positive integer (minor units)"));
		const paid = await pay(t.a.member.token, id, { wallet: W.am, amount: 450 });
		expect(paid.status).toBe(200);
		expect(paid.body.data).toMatchObject({ status: "PAID", amount: 450 });
		expect(await balances([W.am, W.aa])).toEqual([am0 - 450, aa0 + 450]);
	});

	test("currencies never mix: an invoice or a transaction in another currency than the wallets' answers 400, nothing moves", async () => {
		await deposit(t.a.admin.token, W.am, 60);
		const eur = (await ok(t.as(t.a.member.token, "POST", "/financial/wallets", { user: t.a.member.id, currency: "EUR" }), "EUR wallet")).data.id;
		const [am0, aa0] = await balances([W.am, W.aa]);
		const id = await invoice({ amount: 60, currency: "EUR" });
		expect(answer(await pay(t.a.member.token, id, { wallet: W.am }))).toEqual(refused(400, `wallet ${W.am} holds USD, not EUR`));
		expect((await ok(t.as(t.a.admin.token, "GET", `/financial/invoices/${id}`), "get")).data.status).toBe("ISSUED");
		expect(answer(await init(t.a.member.token, { amount: 10, currency: "EUR", payers: [{ wallet: W.am, amount: 10 }], payees: [{ wallet: W.aa, amount: 10 }] }))).toEqual(
			refused(400, `wallet ${W.am} holds USD, not EUR`),
		);
		expect(answer(await init(t.a.member.token, { amount: 10, payers: [{ wallet: W.am, amount: 10 }], payees: [{ wallet: eur, amount: 10 }] }))).toEqual(
			refused(400, `wallet ${eur} holds EUR, not USD`),
		);
		expect(answer(await init(t.a.admin.token, { type: "DEPOSIT", amount: 10, currency: "USD", payees: [{ wallet: eur, amount: 10 }] }))).toEqual(
			refused(400, `wallet ${eur} holds EUR, not USD`),
		);
		expect(await balances([W.am, W.aa, eur])).toEqual([am0, aa0, 0]);
		// A wallet holding money keeps its currency (relabelling it would turn dollars into euros).
		expect(answer(await t.as(t.a.member.token, "PATCH", `/financial/wallets/${W.am}`, { currency: "EUR" }))).toEqual(
			refused(409, `wallet ${W.am} holds a balance: its currency cannot change`),
		);
		expect(answer(await t.as(t.a.admin.token, "PATCH", "/financial/wallets/bulk", { currency: "EUR" }, { "x-zone": "client" }))).toEqual(
			refused(409, "a wallet of the patch holds a balance: its currency cannot change"),
		);
		expect((await wallets().findOne({ id: W.am })).currency).toBe(WALLET_CURRENCY);
		// The transaction records the wallets' currency when the body names none.
		const tx = await init(t.a.member.token, { amount: 1, payers: [{ wallet: W.am, amount: 1 }], payees: [{ wallet: W.aa, amount: 1 }] });
		expect(tx.body.data).toMatchObject({ currency: WALLET_CURRENCY, state: "PENDING" });
	});

	test("PAID is set by the platform: 400 on create and patch; a paid invoice keeps its status, amount and currency (409)", async () => {
		const msg = "status PAID is set by the platform";
		expect(answer(await t.as(t.a.admin.token, "POST", "/financial/invoices", { amount: 10, status: "PAID" }))).toEqual(refused(400, msg));
		expect(answer(await t.as(t.a.admin.token, "POST", "/financial/invoices/bulk", { items: [{ amount: 10 }, { amount: 10, status: "PAID" }] }))).toEqual(refused(400, msg));
		const id = await invoice({ amount: 10 });
		expect(answer(await t.as(t.a.admin.token, "PATCH", `/financial/invoices/${id}`, { status: "PAID" }))).toEqual(refused(400, msg));
		expect(answer(await t.as(t.a.admin.token, "PATCH", "/financial/invoices/bulk", { status: "PAID" }))).toEqual(refused(400, msg));
		expect((await ok(t.as(t.a.admin.token, "GET", `/financial/invoices/${id}`), "get")).data.status).toBe("ISSUED");

		await deposit(t.a.admin.token, W.am, 10);
		expect((await pay(t.a.member.token, id, { wallet: W.am })).status).toBe(200);
		const [am0, aa0] = await balances([W.am, W.aa]);
		for (const body of [{ status: "ISSUED" }, { amount: 1 }, { currency: "EUR" }, { status: "CANCELLED" }])
			expect(answer(await t.as(t.a.admin.token, "PATCH", `/financial/invoices/${id}`, body))).toEqual(refused(409, `invoice ${id} is already paid`));
		expect(answer(await t.as(t.a.admin.token, "PATCH", "/financial/invoices/bulk", { status: "ISSUED" }))).toEqual(
			refused(409, "a paid invoice keeps its status, amount and currency"),
		);
		// Re-opening it would let it be paid twice.
		expect(answer(await pay(t.a.member.token, id, { wallet: W.am }))).toEqual(refused(409, `invoice ${id} is already paid`));
		expect(await balances([W.am, W.aa])).toEqual([am0, aa0]);
		expect((await ok(t.as(t.a.admin.token, "GET", `/financial/invoices/${id}`), "get")).data).toMatchObject({ status: "PAID", amount: 10 });
		// Anything else of a paid invoice is the owner's to change.
		expect((await t.as(t.a.admin.token, "PATCH", `/financial/invoices/${id}`, { description: "settled" })).status).toBe(200);
	});

	/** Two new wallets of tenant a's admin (in its write view), empty. */
	const twoWallets = async (): Promise<[string, string]> => {
		const mk = async () => (await ok(t.as(t.a.admin.token, "POST", "/financial/wallets", { user: t.a.admin.id, currency: WALLET_CURRENCY }), "wallet")).data.id as string;
		return [await mk(), await mk()];
	};
	const transfer = async (token: string, from: string, to: string, amount: number) =>
		(await ok(init(token, { amount, payers: [{ wallet: from, amount }], payees: [{ wallet: to, amount }] }), "transfer")).data as StoredDoc & { id: string };
	const startSaga = async (token: string) => ({ "x-saga-session": (await ok(t.as(token, "POST", "/essential/sagas/start", { ttl: 60 }), "saga")).data.id as string });
	const endSaga = async (token: string, staged: Record<string, string>, how: "commit" | "abort") =>
		(await ok(t.as(token, "GET", `/essential/sagas/${staged["x-saga-session"]}/${how}`), `${how} saga`)).data.state;

	test("no saga compensation creates money through a destroy: a wallet in a pending transfer cannot be destroyed in a saga, and aborting both leaves one deposit", async () => {
		const admin = t.a.admin.token;
		const [w1, w2] = await twoWallets();
		await deposit(admin, w1, 100);
		const tx = await transfer(admin, w1, w2, 100);
		expect(tx.state).toBe("PENDING");
		const staged = await startSaga(admin);
		expect(answer(await t.as(admin, "DELETE", `/financial/wallets/${w2}/destroy`, undefined, staged))).toEqual(
			refused(409, `wallet ${w2} takes part in pending transaction ${tx.id}`),
		);
		expect((await ok(t.as(admin, "GET", `/financial/transactions/${tx.id}/abort`), "abort the transfer")).data.state).toBe("CANCELLED");
		expect(await endSaga(admin, staged, "abort")).toBe("ABORTED");
		expect(await balances([w1, w2])).toEqual([100, 0]);
		expect(await wallets().count({ id: { $in: [w1, w2] } })).toBe(2);
	});

	test("a wallet holding money or taking part in a pending transaction is neither deleted nor destroyed (409 naming why), directly or in a saga", async () => {
		const admin = t.a.admin.token;
		const [w1, w2] = await twoWallets();
		await deposit(admin, w1, 100);
		const tx = await transfer(admin, w1, w2, 60);
		const staged = await startSaga(admin);
		// Either side of a pending transaction, whatever its balance (the payer holds 40, a balance of its own).
		for (const w of [w1, w2])
			for (const headers of [undefined, staged]) {
				expect(answer(await t.as(admin, "DELETE", `/financial/wallets/${w}`, undefined, headers))).toEqual(refused(409, `wallet ${w} takes part in pending transaction ${tx.id}`));
				expect(answer(await t.as(admin, "DELETE", `/financial/wallets/${w}/destroy`, undefined, headers))).toEqual(
					refused(409, `wallet ${w} takes part in pending transaction ${tx.id}`),
				);
			}
		expect((await ok(t.as(admin, "GET", `/financial/transactions/${tx.id}/verify`), "verify")).data.state).toBe("VERIFIED");
		for (const headers of [undefined, staged]) {
			expect(answer(await t.as(admin, "DELETE", `/financial/wallets/${w2}`, undefined, headers))).toEqual(
				refused(409, `wallet ${w2} holds a balance of 60; move it out before deleting the wallet`),
			);
			expect(answer(await t.as(admin, "DELETE", `/financial/wallets/${w2}/destroy`, undefined, headers))).toEqual(
				refused(409, `wallet ${w2} holds a balance of 60; move it out before destroying the wallet`),
			);
		}
		// The refusals staged nothing: the saga has no stage, and its commit changes nothing.
		const sq = encodeURIComponent(JSON.stringify({ saga: staged["x-saga-session"] }));
		expect((await ok(t.as(admin, "GET", `/essential/saga-stages?query=${sq}`), "stages")).total).toBe(0);
		expect(await endSaga(admin, staged, "commit")).toBe("COMMITTED");
		expect(await balances([w1, w2])).toEqual([40, 60]);

		// The check reads the balance: a grant whose field list hides it answers 403, whatever the balance.
		const { limited } = t.a;
		const lw = walletIdOf(limited.id);
		await waitForValue("the limited user's wallet", () => wallets().findOne({ id: lw }), 30_000);
		const narrow = await t.grant(admin, { subject: limited.subject, action: "write", object: "financial:wallets", field: ["description"] });
		expect(answer(await t.as(limited.token, "DELETE", `/financial/wallets/${lw}`))).toEqual(
			refused(403, "delete uses balance, which your write grant on financial:wallets does not let you read"),
		);
		await ok(t.as(admin, "DELETE", `/auth/grants/${narrow.id}`), "drop the narrow grant");
		await t.grant(admin, { subject: limited.subject, action: "write", object: "financial:wallets" });
		// A pending transaction the caller cannot read (the limited user has no grant on transactions) is not named.
		const dep = (await ok(init(admin, { type: "DEPOSIT", amount: 5, payees: [{ wallet: lw, amount: 5 }] }), "deposit")).data;
		expect(answer(await t.as(limited.token, "DELETE", `/financial/wallets/${lw}`))).toEqual(refused(409, `wallet ${lw} takes part in a pending transaction`));
		expect((await ok(t.as(admin, "GET", `/financial/transactions/${dep.id}/abort`), "abort")).data.state).toBe("CANCELLED");
		expect(await balances([lw])).toEqual([0]);

		// Emptied, it goes: deleted in a saga (out of every transaction's reach meanwhile), back with the abort.
		await ok(t.as(admin, "GET", `/financial/transactions/${(await transfer(admin, w2, w1, 60)).id}/verify`), "empty w2");
		const s1 = await startSaga(admin);
		expect((await ok(t.as(admin, "DELETE", `/financial/wallets/${w2}`, undefined, s1), "staged delete")).data.deleted_at).toEqual(expect.any(String));
		expect(answer(await init(admin, { amount: 1, payers: [{ wallet: w1, amount: 1 }], payees: [{ wallet: w2, amount: 1 }] }))).toEqual(refused(404, `wallet ${w2} not found`));
		expect(await endSaga(admin, s1, "abort")).toBe("ABORTED");
		expect((await ok(t.as(admin, "GET", `/financial/wallets/${w2}`), "w2 back")).data).toMatchObject({ id: w2, balance: 0 });
		// Destroyed in a saga, back with the abort; deleted, restored, destroyed for good outside one.
		const s2 = await startSaga(admin);
		await ok(t.as(admin, "DELETE", `/financial/wallets/${w2}/destroy`, undefined, s2), "staged destroy");
		expect(await wallets().findOne({ id: w2 })).toBeNull();
		expect(await endSaga(admin, s2, "abort")).toBe("ABORTED");
		expect(await wallets().findOne({ id: w2 })).toMatchObject({ id: w2, balance: 0, deleted_at: null });
		await ok(t.as(admin, "DELETE", `/financial/wallets/${w2}`), "delete");
		await ok(t.as(admin, "PUT", `/financial/wallets/${w2}/restore`), "restore");
		await ok(t.as(admin, "DELETE", `/financial/wallets/${w2}/destroy`), "destroy");
		expect(await wallets().findOne({ id: w2 })).toBeNull();
		expect(await balances([w1])).toEqual([100]);
	});

	test("a removal is conditional on the wallet its check saw: money arriving between the check and the write is seen (409), or the caller's If-Match answers 412", async () => {
		const admin = t.a.admin.token;
		const hooks = walletHooks as Required<Pick<CollectionHooks, "beforeRemove">>;
		const check = hooks.beforeRemove;
		const landed: string[] = [];
		try {
			for (const [suffix, ifMatch] of [
				["", false],
				["/destroy", false],
				["", true],
			] as const) {
				const [w] = await twoWallets();
				let first = true;
				// A deposit lands once the check has passed, before the removal's write.
				hooks.beforeRemove = async (ctx, before, op) => {
					await check(ctx, before, op);
					if (!first) return;
					first = false;
					landed.push((await ok(init(admin, { type: "DEPOSIT", amount: 7, payees: [{ wallet: w, amount: 7 }] }), "deposit in between")).data.id);
				};
				const headers = ifMatch ? { "if-match": (await t.as(admin, "GET", `/financial/wallets/${w}`)).headers.get("etag")! } : undefined;
				const r = await t.as(admin, "DELETE", `/financial/wallets/${w}${suffix}`, undefined, headers);
				expect(answer(r)).toEqual(ifMatch ? refused(412, "precondition failed") : refused(409, `wallet ${w} takes part in pending transaction ${landed[landed.length - 1]}`));
				expect(await wallets().findOne({ id: w })).toMatchObject({ id: w, balance: 7, deleted_at: null });
			}
		} finally {
			hooks.beforeRemove = check;
		}
	});

	test("a balance move on a wallet that is gone is never undone nor counted undone: the transfer stands, and the wallet comes back with what the ledger holds", async () => {
		const admin = t.a.admin.token;
		const [w1, w2] = await twoWallets();
		await deposit(admin, w1, 100);
		// A destroy the rules above could not refuse (a stage an earlier version recorded): the wallet's document as the
		// stage keeps it, then gone from the store; its compensation is the settle action of financial/wallets.
		const vanish = async (id: string) => {
			const before = (await wallets().findOne({ id })) as StoredDoc;
			expect(await wallets().removeMany({ id })).toBe(1);
			return () => t.p.broker.call("financial.wallets.settle", { images: [{ kind: "destroy", id, before }], reason: "abort" });
		};
		// The payee is gone: its credit cannot be taken back, so the payer is not refunded.
		const tx = await transfer(admin, w1, w2, 100);
		const back2 = await vanish(w2);
		expect(answer(await t.as(admin, "GET", `/financial/transactions/${tx.id}/abort`))).toEqual(
			refused(409, `transaction ${tx.id} cannot be cancelled: wallet ${w2} no longer exists`),
		);
		expect((await fin().collectionStore("transactions").findOne({ id: tx.id })).state).toBe("VERIFIED");
		expect(await balances([w1])).toEqual([0]);
		expect(await back2()).toEqual(["undone"]);
		expect(await balances([w1, w2])).toEqual([0, 100]);
		// The payer is gone: the payee's credit is not taken back either (the refund would have nowhere to go).
		const tx2 = await transfer(admin, w2, w1, 100);
		const back1 = await vanish(w2);
		expect(answer(await t.as(admin, "GET", `/financial/transactions/${tx2.id}/abort`))).toEqual(
			refused(409, `transaction ${tx2.id} cannot be cancelled: wallet ${w2} no longer exists`),
		);
		expect(await balances([w1])).toEqual([100]);
		expect(await back1()).toEqual(["undone"]);
		expect(await balances([w1, w2])).toEqual([100, 0]);
	});
});
