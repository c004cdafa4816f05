/**
 * Financial transactions and payments on sagas: transfer, verify, abort and expiry restore balances exactly; 50
 * concurrent transfers from one wallet never overdraw it and the sum of all balances stays constant; invoices paid
 * once; every transaction links to an existing saga.
 */
import { randomBytes } from "crypto";
import { bootPlatform, type TestPlatform } from "../helpers/platform";
import { createUser, tokenOf } from "../helpers/auth";
import { walletIdOf } from "../../services/financial.service";
import { waitForValue } from "../helpers/wait";

jest.setTimeout(120_000);

let p: TestPlatform;
let root: string;

interface Party {
	id: string;
	token: string;
	wallet: string;
}

async function party(grants: Array<[string, string]>): Promise<Party> {
	const username = `fi-${randomBytes(4).toString("hex")}`;
	const password = `pw-${randomBytes(8).toString("hex")}`;
	const u = await createUser(p.http, root, { username, password, subjects: [] });
	for (const [action, object] of grants)
		expect((await p.http("POST", "/auth/grants", { token: root, body: { subject: `${u.id}@${p.root.domain}`, action, object } })).status).toBe(200);
	const wallet = walletIdOf(u.id);
	await waitForValue("the wallet", async () => ((await p.broker.getLocalService("financial")) as any).collectionStore("wallets").findOne({ id: wallet }));
	const token = (await tokenOf(p.http, { grant_type: "password", client_id: p.root.client_id, username, password })).access_token;
	return { id: u.id, token, wallet };
}

const PAYER_GRANTS: Array<[string, string]> = [
	["init", "financial:transactions"],
	["verify", "financial:transactions"],
	["read", "financial:transactions"],
	["write", "financial:wallets"],
	["read", "financial:wallets"],
	["payment", "financial:invoices"],
];

async function balance(wallet: string): Promise<number> {
	const w = await (p.broker.getLocalService("financial") as any).collectionStore("wallets").findOne({ id: wallet });
	return w.balance;
}

async function deposit(wallet: string, amount: number) {
	const r = await p.http("POST", "/financial/transactions/init", { token: root, body: { type: "DEPOSIT", amount, payees: [{ wallet, amount }] } });
	expect(r.status).toBe(200);
	const v = await p.http("GET", `/financial/transactions/${r.body.data.id}/verify`, { token: root });
	expect(v.status).toBe(200);
	expect(v.body.data.state).toBe("VERIFIED");
}

beforeAll(async () => {
	p = await bootPlatform();
	root = await p.rootToken();
}, 60_000);
afterAll(async () => {
	await p?.cleanup();
});

test("transfer then verify: balances moved; abort: balances restored exactly and CANCELLED; repeats answer the same", async () => {
	const a = await party(PAYER_GRANTS);
	const b = await party(PAYER_GRANTS);
	await deposit(a.wallet, 1000);
	expect(await balance(a.wallet)).toBe(1000);

	const t1 = await p.http("POST", "/financial/transactions/init", {
		token: a.token,
		body: { amount: 300, currency: "USD", payers: [{ wallet: a.wallet, amount: 300 }], payees: [{ wallet: b.wallet, amount: 300 }] },
	});
	expect(t1.status).toBe(200);
	expect(t1.body.data).toMatchObject({ amount: 300, type: "TRANSFER", state: "PENDING", owner: a.id });
	expect(t1.body.data.saga).toMatch(/^[0-9a-f]{24}$/);
	expect([await balance(a.wallet), await balance(b.wallet)]).toEqual([700, 300]);
	const v = await p.http("GET", `/financial/transactions/${t1.body.data.id}/verify`, { token: a.token });
	expect(v.status).toBe(200);
	expect(v.body.data.state).toBe("VERIFIED");
	expect(Date.parse(v.body.data.verified_at)).toBeGreaterThan(0);
	expect((await p.http("GET", `/financial/transactions/${t1.body.data.id}/verify`, { token: a.token })).body.data).toEqual(v.body.data);
	// A verified transaction cannot be aborted.
	expect((await p.http("GET", `/financial/transactions/${t1.body.data.id}/abort`, { token: a.token })).body).toEqual({
		statusCode: 409,
		message: `transaction ${t1.body.data.id} is verified`,
		error: "Conflict",
	});
	expect([await balance(a.wallet), await balance(b.wallet)]).toEqual([700, 300]);
	// The saga it links to exists and is committed.
	const saga = await p.http("GET", `/essential/sagas/${t1.body.data.saga}`, { token: a.token });
	expect(saga.status).toBe(403); // a has no read grant on sagas: the link is checked by the platform instead
	const stored = await (p.broker.getLocalService("essential") as any).collectionStore("sagas").findOne({ id: t1.body.data.saga });
	expect(stored).toMatchObject({ state: "COMMITTED", owner: a.id });

	const t2 = await p.http("POST", "/financial/transactions/init", {
		token: a.token,
		body: { amount: 200, payers: [{ wallet: a.wallet, amount: 200 }], payees: [{ wallet: b.wallet, amount: 200 }] },
	});
	expect([await balance(a.wallet), await balance(b.wallet)]).toEqual([500, 500]);
	const ab = await p.http("GET", `/financial/transactions/${t2.body.data.id}/abort`, { token: a.token });
	expect(ab.status).toBe(200);
	expect(ab.body.data).toMatchObject({ state: "CANCELLED" });
	expect(Date.parse(ab.body.data.canceled_at)).toBeGreaterThan(0);
	expect([await balance(a.wallet), await balance(b.wallet)]).toEqual([700, 300]);
	expect((await p.http("GET", `/financial/transactions/${t2.body.data.id}/abort`, { token: a.token })).body.data).toEqual(ab.body.data);
	expect((await p.http("GET", `/financial/transactions/${t2.body.data.id}/verify`, { token: a.token })).body).toEqual({
		statusCode: 409,
		message: `transaction ${t2.body.data.id} is cancelled`,
		error: "Conflict",
	});
	expect([await balance(a.wallet), await balance(b.wallet)]).toEqual([700, 300]);
});

test("insufficient balance: 409, nothing changed; bad bodies: 400; another's wallet as payer: 404; balance in a body: 400", async () => {
	const a = await party(PAYER_GRANTS);
	const b = await party(PAYER_GRANTS);
	await deposit(a.wallet, 100);
	const over = await p.http("POST", "/financial/transactions/init", {
		token: a.token,
		body: { amount: 101, payers: [{ wallet: a.wallet, amount: 101 }], payees: [{ wallet: b.wallet, amount: 101 }] },
	});
	expect(over.body).toEqual({ statusCode: 409, message: "insufficient balance", error: "Conflict" });
	expect([await balance(a.wallet), await balance(b.wallet)]).toEqual([100, 0]);
	const list = await p.http("GET", "/financial/transactions", { token: a.token });
	expect(list.body.total).toBe(0);
	for (const [body, message] of [
		[{ amount: 10.5, payers: [{ wallet: a.wallet, amount: 10.5 }], payees: [{ wallet: b.wallet, amount: 10.5 }] }, "amount must be a positive integer (minor units)"],
		[{ amount: 10, payers: [{ wallet: a.wallet, amount: 10 }], payees: [{ wallet: b.wallet, amount: 9 }] }, "payees must sum to amount"],
		[{ amount: 10, payers: [{ wallet: a.wallet, amount: -10 }], payees: [{ wallet: b.wallet, amount: 10 }] }, "payers[0].amount must be a positive integer (minor units)"],
	] as const) {
		const r = await p.http("POST", "/financial/transactions/init", { token: a.token, body });
		expect(r.body).toEqual({ statusCode: 400, message, error: "Bad Request" });
	}
	// b's wallet is not in a's view: taking money from it answers 404.
	const steal = await p.http("POST", "/financial/transactions/init", {
		token: a.token,
		body: { amount: 1, payers: [{ wallet: b.wallet, amount: 1 }], payees: [{ wallet: a.wallet, amount: 1 }] },
	});
	expect(steal.body).toEqual({ statusCode: 404, message: `wallet ${b.wallet} not found`, error: "Not Found" });
	// Money only enters with a DEPOSIT, which needs manage on wallets.
	const dep = await p.http("POST", "/financial/transactions/init", { token: a.token, body: { type: "DEPOSIT", amount: 5, payees: [{ wallet: a.wallet, amount: 5 }] } });
	expect(dep.body).toEqual({ statusCode: 403, message: "no grant for manage on financial:wallets", error: "Forbidden" });
	const patch = await p.http("PATCH", `/financial/wallets/${a.wallet}`, { token: a.token, body: { balance: 1_000_000 } });
	expect(patch.body).toEqual({ statusCode: 400, message: "balance is set by the platform", error: "Bad Request" });
	// A raw transaction must link to a saga that exists.
	const raw = await p.http("POST", "/financial/transactions", { token: root, body: { amount: 5, saga: "0123456789abcdef01234567" } });
	expect(raw.body).toEqual({ statusCode: 400, message: "saga 0123456789abcdef01234567 does not exist", error: "Bad Request" });
	expect([await balance(a.wallet), await balance(b.wallet)]).toEqual([100, 0]);
});

test("expiry: the saga's ttl passes before verify → balances restored exactly, FAILED with failed_at", async () => {
	const a = await party(PAYER_GRANTS);
	const b = await party(PAYER_GRANTS);
	await deposit(a.wallet, 500);
	const t = await p.http("POST", "/financial/transactions/init", {
		token: a.token,
		body: { amount: 120, ttl: 5, payers: [{ wallet: a.wallet, amount: 120 }], payees: [{ wallet: b.wallet, amount: 120 }] },
	});
	expect(t.status).toBe(200);
	expect([await balance(a.wallet), await balance(b.wallet)]).toEqual([380, 120]);
	const failed = await waitForValue(
		"FAILED",
		async () => {
			const r = await p.http("GET", `/financial/transactions/${t.body.data.id}`, { token: a.token });
			return r.body.data.state === "FAILED" ? r.body.data : null;
		},
		25_000,
	);
	expect(Date.parse(failed.failed_at)).toBeGreaterThan(0);
	expect([await balance(a.wallet), await balance(b.wallet)]).toEqual([500, 0]);
	expect((await p.http("GET", `/financial/transactions/${t.body.data.id}/verify`, { token: a.token })).body).toEqual({
		statusCode: 409,
		message: `transaction ${t.body.data.id} is failed`,
		error: "Conflict",
	});
});

test("50 concurrent transfers from one wallet never overdraw it; the sum of all balances stays constant", async () => {
	const a = await party(PAYER_GRANTS);
	const others = [await party(PAYER_GRANTS), await party(PAYER_GRANTS)];
	await deposit(a.wallet, 1000);
	const total = async () => (await balance(a.wallet)) + (await balance(others[0].wallet)) + (await balance(others[1].wallet));
	expect(await total()).toBe(1000);
	const results = await Promise.all(
		Array.from({ length: 50 }, (_, i) =>
			p.http("POST", "/financial/transactions/init", {
				token: a.token,
				body: { amount: 30, payers: [{ wallet: a.wallet, amount: 30 }], payees: [{ wallet: others[i % 2].wallet, amount: 30 }] },
			}),
		),
	);
	const ok = results.filter((r) => r.status === 200);
	const refused = results.filter((r) => r.status === 409);
	expect(ok.length).toBe(33);
	expect(refused.length).toBe(17);
	for (const r of refused) expect(r.body).toEqual({ statusCode: 409, message: "insufficient balance", error: "Conflict" });
	expect(await balance(a.wallet)).toBe(10);
	expect(await total()).toBe(1000);
	// Abort half of them: balances come back exactly.
	await Promise.all(ok.slice(0, 10).map((r) => p.http("GET", `/financial/transactions/${r.body.data.id}/abort`, { token: a.token })));
	expect(await balance(a.wallet)).toBe(310);
	expect(await total()).toBe(1000);
});

test("an invoice is paid once: PAID, paid_at, transaction; a second payment answers 409", async () => {
	const seller = await party([
		["write", "financial:invoices"],
		["read", "financial:invoices"],
		["payment", "financial:invoices"],
	]);
	const buyer = await party(PAYER_GRANTS);
	await deposit(buyer.wallet, 250);
	const inv = await p.http("POST", "/financial/invoices", { token: seller.token, body: { amount: 200, currency: "USD", status: "ISSUED", shares: [buyer.id] } });
	expect(inv.status).toBe(200);
	const [p1, p2] = await Promise.all([
		p.http("POST", `/financial/invoices/${inv.body.data.id}/payment`, { token: buyer.token, body: { wallet: buyer.wallet } }),
		p.http("POST", `/financial/invoices/${inv.body.data.id}/payment`, { token: buyer.token, body: { wallet: buyer.wallet } }),
	]);
	const paid = [p1, p2].find((r) => r.status === 200)!;
	const other = [p1, p2].find((r) => r !== paid)!;
	expect(paid.body.data).toMatchObject({ id: inv.body.data.id, status: "PAID" });
	expect(paid.body.data.transaction).toMatch(/^[0-9a-f]{24}$/);
	expect(Date.parse(paid.body.data.paid_at)).toBeGreaterThan(0);
	expect(other.body).toEqual({ statusCode: 409, message: `invoice ${inv.body.data.id} is already paid`, error: "Conflict" });
	expect([await balance(buyer.wallet), await balance(seller.wallet)]).toEqual([50, 200]);
	const again = await p.http("POST", `/financial/invoices/${inv.body.data.id}/payment`, { token: buyer.token, body: { wallet: buyer.wallet } });
	expect(again.body).toEqual({ statusCode: 409, message: `invoice ${inv.body.data.id} is already paid`, error: "Conflict" });
	// Not enough money: 409, the invoice stays unpaid.
	const inv2 = await p.http("POST", "/financial/invoices", { token: seller.token, body: { amount: 100, status: "ISSUED", shares: [buyer.id] } });
	const poor = await p.http("POST", `/financial/invoices/${inv2.body.data.id}/payment`, { token: buyer.token, body: { wallet: buyer.wallet } });
	expect(poor.body).toEqual({ statusCode: 409, message: "insufficient balance", error: "Conflict" });
	expect((await p.http("GET", `/financial/invoices/${inv2.body.data.id}`, { token: seller.token })).body.data.status).toBe("ISSUED");
	expect([await balance(buyer.wallet), await balance(seller.wallet)]).toEqual([50, 200]);
});

test("a credit the payee already spent cannot be taken back: abort answers 409, nothing moves back, no money is created", async () => {
	const a = await party(PAYER_GRANTS);
	const b = await party(PAYER_GRANTS);
	const c = await party(PAYER_GRANTS);
	await deposit(a.wallet, 100);
	const t = await p.http("POST", "/financial/transactions/init", {
		token: a.token,
		body: { amount: 100, payers: [{ wallet: a.wallet, amount: 100 }], payees: [{ wallet: b.wallet, amount: 100 }] },
	});
	expect(t.status).toBe(200);
	const spend = await p.http("POST", "/financial/transactions/init", {
		token: b.token,
		body: { amount: 100, payers: [{ wallet: b.wallet, amount: 100 }], payees: [{ wallet: c.wallet, amount: 100 }] },
	});
	expect(spend.status).toBe(200);
	const ab = await p.http("GET", `/financial/transactions/${t.body.data.id}/abort`, { token: a.token });
	expect(ab.body).toEqual({ statusCode: 409, message: `transaction ${t.body.data.id} cannot be cancelled: a payee already spent its credit`, error: "Conflict" });
	expect([await balance(a.wallet), await balance(b.wallet), await balance(c.wallet)]).toEqual([0, 0, 100]);
	const tx = await p.http("GET", `/financial/transactions/${t.body.data.id}`, { token: a.token });
	expect(tx.body.data.state).toBe("VERIFIED");
	const stages = await (p.broker.getLocalService("essential") as any).collectionStore("saga-stages").find({ query: { saga: t.body.data.saga } });
	expect(stages.find((s: any) => s.bucket === "financial/wallets")).toMatchObject({ state: "conflict", conflict: true });
	// b's own transfer aborts cleanly afterwards: c gives the 100 back to b.
	const back = await p.http("GET", `/financial/transactions/${spend.body.data.id}/abort`, { token: b.token });
	expect(back.body.data.state).toBe("CANCELLED");
	expect([await balance(a.wallet), await balance(b.wallet), await balance(c.wallet)]).toEqual([0, 100, 0]);
});
