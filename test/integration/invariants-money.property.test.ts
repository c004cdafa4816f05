/**
 * Model-based property (fast-check) on both document stores: random sequences of saga start / stage / commit / abort /
 * expiry, transfers (init, then verify, abort or left pending), deposits, withdrawals, invoice payments, concurrent
 * repeats of one request, and wallets created, deleted, destroyed and restored, inside sagas and outside, by the users
 * of two tenants (test/helpers/tenants.ts). A model predicts every answer, every balance and which wallets exist
 * (deleted or not) after a saga's compensation; after every step the stores are read back and must show:
 * - no balance below zero, every balance the model's, every wallet there (deleted or not) or gone as the model says;
 * - the sum of all balances moved only by deposits and withdrawals (PENDING or VERIFIED, read from the store), and
 *   every wallet's balance moved exactly by the transactions naming it (a destroyed wallet held nothing);
 * - no wallet changed outside the acting user's tenant (the operator's never);
 * - every transaction and saga in exactly one state, with only that state's date; at the end of a run, none pending.
 *
 * Saga expiry is made due by moving the saga's `expires_at` into the past, then the watcher's scan is run at once
 * (`essential.sagas.expire`): the same compensation as a real expiry, without waiting for the ttl.
 * Bounded: MONEY_RUNS runs (default 25, the EXAMPLES below first) of at most 15 steps per store, about 5 to 20 s each;
 * no shrinking (a failure prints its seed, path and the steps it ran: `MONEY_SEED=<seed> MONEY_PATH=<path>` replays it).
 */
import fc from "fast-check";
import { bootTenancy, ok, type Tenancy, type TenantUser } from "../helpers/tenants";
import type { HttpResult } from "../helpers/platform";
import { WALLET_CURRENCY, walletIdOf } from "../../services/financial.service";
import type { StoredDoc } from "../../stores";
import { waitForValue } from "../helpers/wait";
import { withStatusProbe } from "../helpers/status-probe";

jest.setTimeout(600_000);

const RUNS = Number(process.env.MONEY_RUNS ?? 25);
const MAX_STEPS = 15;

type TenantName = "a" | "b" | "root";
type Then = "verify" | "abort" | "keep";
type TxState = "PENDING" | "VERIFIED" | "CANCELLED" | "FAILED";
type SagaState = "AWAITING" | "COMMITTED" | "ABORTED";
interface Leg {
	wallet: string;
	amount: number;
}
interface MWallet {
	tenant: TenantName;
	owner: string;
	balance: number;
	deleted: boolean;
	/** The platform's wallet of its owner (never deleted nor destroyed by a run: payments and later runs use it). */
	platform: boolean;
	/**
	 * Its content: any write gives it a new one (a balance move, a settlement dropping a move's tag, a delete); undoing
	 * a stage puts back the one before the stage. A stage is undone only while the wallet still has the content the
	 * stage left (compensation compares documents, not revisions).
	 */
	rev: number;
}
/** A staged write of a wallet, as compensation will see it. */
interface MStage {
	wallet: string;
	kind: "create" | "update" | "destroy";
	before: number;
	after: number;
	/** Of an update: whether the wallet was deleted before it. */
	deletedBefore?: boolean;
}
interface MTx {
	id: string;
	saga: string;
	type: "TRANSFER" | "DEPOSIT" | "WITHDRAW";
	by: number;
	payers: Leg[];
	payees: Leg[];
	state: TxState;
}
interface MSaga {
	id: string;
	by: number;
	state: SagaState;
	created?: string;
	/** The staged wallet's balance when it was staged. */
	balanceAtStage?: number;
	stages: MStage[];
}

/** A wallet (or user) of the actor's tenant, or, now and then, one outside it; `made`: one the run created. */
interface Pick {
	foreign: boolean;
	i: number;
	made?: boolean;
}
type Step =
	| { k: "deposit"; by: number; to: Pick; amount: number; then: Then }
	| { k: "withdraw"; by: number; from: Pick; amount: number; then: Then }
	| { k: "transfer"; by: number; from: number; fromMade?: boolean; to: Pick; amount: number; then: Then; repeat: number }
	| { k: "settle"; tx: number; how: "verify" | "abort" | "expire"; repeat: number }
	| { k: "invoice"; owner: number; payer: Pick; amount: number; pin: "none" | "right" | "wrong"; repeat: number }
	| { k: "sagaStart"; by: number; stage: "patch" | "create" | "none" }
	/** Money into the wallet a saga in flight staged (its admin's deposit), verified or not. */
	| { k: "sagaMove"; saga: number; amount: number; then: Then }
	| { k: "sagaEnd"; saga: number; how: "commit" | "abort" | "expire"; repeat: number }
	| { k: "walletNew"; by: number }
	/** On one of the actor's own wallets (not its platform one), or, foreign, anyone else's; staged in its saga in flight, if any. */
	| { k: "walletOp"; by: number; op: "delete" | "destroy" | "restore"; target: Pick; inSaga: boolean };

const amount = fc.integer({ min: 1, max: 120 });
const then = fc.constantFrom<Then>("verify", "abort", "keep");
const pick = fc.nat(63);
const target: fc.Arbitrary<Pick> = fc.record({
	foreign: fc.oneof({ weight: 4, arbitrary: fc.constant(false) }, { weight: 1, arbitrary: fc.constant(true) }),
	i: pick,
	made: fc.boolean(),
});
const actor = fc.integer({ min: 0, max: 3 });
const repeat = fc.integer({ min: 1, max: 3 });
const STEP: fc.Arbitrary<Step> = fc.oneof(
	{ weight: 4, arbitrary: fc.record({ k: fc.constant("deposit" as const), by: fc.integer({ min: 0, max: 1 }), to: target, amount: fc.integer({ min: 20, max: 300 }), then }) },
	{ weight: 2, arbitrary: fc.record({ k: fc.constant("withdraw" as const), by: fc.integer({ min: 0, max: 1 }), from: target, amount, then }) },
	{ weight: 4, arbitrary: fc.record({ k: fc.constant("transfer" as const), by: actor, from: pick, fromMade: fc.boolean(), to: target, amount, then, repeat }) },
	{ weight: 3, arbitrary: fc.record({ k: fc.constant("settle" as const), tx: pick, how: fc.constantFrom("verify" as const, "abort" as const, "expire" as const), repeat }) },
	{
		weight: 2,
		arbitrary: fc.record({
			k: fc.constant("invoice" as const),
			owner: actor,
			payer: target,
			amount,
			pin: fc.constantFrom("none" as const, "right" as const, "wrong" as const),
			repeat,
		}),
	},
	{ weight: 3, arbitrary: fc.record({ k: fc.constant("sagaStart" as const), by: actor, stage: fc.constantFrom("patch" as const, "create" as const, "none" as const) }) },
	{ weight: 2, arbitrary: fc.record({ k: fc.constant("sagaMove" as const), saga: pick, amount: fc.integer({ min: 20, max: 300 }), then }) },
	{ weight: 3, arbitrary: fc.record({ k: fc.constant("sagaEnd" as const), saga: pick, how: fc.constantFrom("commit" as const, "abort" as const, "expire" as const), repeat }) },
	{ weight: 2, arbitrary: fc.record({ k: fc.constant("walletNew" as const), by: actor }) },
	{
		weight: 4,
		arbitrary: fc.record({
			k: fc.constant("walletOp" as const),
			by: actor,
			op: fc.constantFrom("delete" as const, "destroy" as const, "restore" as const),
			target,
			inSaga: fc.boolean(),
		}),
	},
);

/**
 * Sequences every run starts with, whatever the seed: the cases random ones reach only now and then. Money moves in
 * a wallet a saga staged (patched, or created), then the saga is aborted (twice at once) or expires; a credit is
 * spent before its transaction is aborted; a saga destroys the payee of a pending transfer, then the transfer and the
 * saga are aborted (issue 31: the undone destroy brought the credit back after the payer's refund); an empty wallet
 * destroyed, deleted and restored in sagas and outside them.
 */
const EXAMPLES: Array<[Step[]]> = [
	[
		[
			{ k: "sagaStart", by: 1, stage: "patch" },
			{ k: "sagaMove", saga: 0, amount: 100, then: "verify" },
			{ k: "sagaEnd", saga: 1, how: "abort", repeat: 2 },
		],
	],
	[
		[
			{ k: "sagaStart", by: 3, stage: "create" },
			{ k: "sagaMove", saga: 0, amount: 50, then: "keep" },
			{ k: "sagaEnd", saga: 1, how: "expire", repeat: 1 },
		],
	],
	[
		[
			{ k: "sagaStart", by: 2, stage: "patch" },
			{ k: "sagaMove", saga: 0, amount: 80, then: "keep" },
			{ k: "sagaEnd", saga: 1, how: "expire", repeat: 1 },
		],
	],
	[
		[
			{ k: "sagaStart", by: 1, stage: "patch" },
			{ k: "sagaMove", saga: 0, amount: 100, then: "keep" },
			{ k: "transfer", by: 1, from: 0, to: { foreign: false, i: 1 }, amount: 100, then: "verify", repeat: 1 },
			{ k: "settle", tx: 0, how: "abort", repeat: 2 },
			{ k: "sagaEnd", saga: 1, how: "abort", repeat: 1 },
		],
	],
	[
		[
			{ k: "walletNew", by: 0 },
			{ k: "walletNew", by: 0 },
			{ k: "deposit", by: 0, to: { foreign: false, i: 0, made: true }, amount: 100, then: "verify" },
			{ k: "transfer", by: 0, from: 0, fromMade: true, to: { foreign: false, i: 1, made: true }, amount: 100, then: "keep", repeat: 1 },
			{ k: "sagaStart", by: 0, stage: "none" },
			{ k: "walletOp", by: 0, op: "destroy", target: { foreign: false, i: 1 }, inSaga: true },
			{ k: "walletOp", by: 0, op: "delete", target: { foreign: false, i: 0 }, inSaga: false },
			{ k: "settle", tx: 1, how: "abort", repeat: 1 },
			{ k: "sagaEnd", saga: 0, how: "abort", repeat: 1 },
		],
	],
	[
		[
			{ k: "walletNew", by: 1 },
			{ k: "sagaStart", by: 1, stage: "none" },
			{ k: "walletOp", by: 1, op: "destroy", target: { foreign: false, i: 0 }, inSaga: true },
			{ k: "sagaEnd", saga: 0, how: "abort", repeat: 1 },
			{ k: "sagaStart", by: 1, stage: "none" },
			{ k: "walletOp", by: 1, op: "delete", target: { foreign: false, i: 0 }, inSaga: true },
			{ k: "walletOp", by: 1, op: "restore", target: { foreign: false, i: 0 }, inSaga: false },
			{ k: "sagaEnd", saga: 1, how: "expire", repeat: 1 },
			{ k: "deposit", by: 0, to: { foreign: false, i: 0, made: true }, amount: 50, then: "keep" },
			{ k: "walletOp", by: 1, op: "destroy", target: { foreign: false, i: 0 }, inSaga: false },
			{ k: "settle", tx: 0, how: "verify", repeat: 1 },
			{ k: "walletOp", by: 1, op: "delete", target: { foreign: false, i: 0 }, inSaga: false },
			{ k: "walletOp", by: 1, op: "restore", target: { foreign: true, i: 0 }, inSaga: false },
		],
	],
	[
		[
			{ k: "walletNew", by: 2 },
			{ k: "sagaStart", by: 2, stage: "none" },
			{ k: "walletOp", by: 2, op: "delete", target: { foreign: false, i: 0 }, inSaga: true },
			{ k: "walletOp", by: 2, op: "restore", target: { foreign: false, i: 0 }, inSaga: true },
			{ k: "walletOp", by: 2, op: "delete", target: { foreign: false, i: 0 }, inSaga: true },
			{ k: "walletOp", by: 2, op: "destroy", target: { foreign: false, i: 0 }, inSaga: true },
			{ k: "sagaEnd", saga: 0, how: "abort", repeat: 2 },
			{ k: "walletOp", by: 2, op: "destroy", target: { foreign: false, i: 0 }, inSaga: false },
			{ k: "walletOp", by: 2, op: "restore", target: { foreign: false, i: 0 }, inSaga: false },
		],
	],
];

const PAST = "2000-01-01T00:00:00.000Z";
const DATES: Record<TxState, string | null> = { PENDING: null, VERIFIED: "verified_at", CANCELLED: "canceled_at", FAILED: "failed_at" };
const SAGA_DATES: Record<SagaState, string | null> = { AWAITING: null, COMMITTED: "committed_at", ABORTED: "aborted_at" };

function must(cond: unknown, what: string): asserts cond {
	if (!cond) throw new Error(what);
}
const said = (r: HttpResult) => `${r.status} ${JSON.stringify(r.body).slice(0, 300)}`;
function refused(r: HttpResult, status: number, messages: string | string[]): void {
	const allowed = ([] as string[]).concat(messages);
	must(r.status === status && r.body?.statusCode === status && allowed.includes(r.body?.message), `expected ${status} ${allowed.join(" | ")}, got ${said(r)}`);
}
function answered(r: HttpResult, what: string): any {
	must(r.status === 200, `${what}: expected 200, got ${said(r)}`);
	return r.body.data;
}

/** What the runs exercised (printed at the end: a property that never reaches a case proves nothing about it). */
const seen = new Map<string, number>();
const saw = (what: string) => seen.set(what, (seen.get(what) ?? 0) + 1);

/** One run of steps against the platform, with its model. */
class Run {
	readonly wallets = new Map<string, MWallet>();
	/** Wallets destroyed (the model as they were then): a saga's compensation may bring them back. */
	readonly gone = new Map<string, MWallet>();
	/** Wallets the run created, in order. */
	readonly made: string[] = [];
	readonly txs: MTx[] = [];
	readonly sagas: MSaga[] = [];
	readonly log: string[] = [];
	private base = 0;
	private start = new Map<string, number>();
	private last = new Map<string, number>();
	private n = 0;
	private revs = 0;

	constructor(private readonly t: Tenancy) {}

	private get users(): TenantUser[] {
		return [this.t.a.admin, this.t.a.member, this.t.b.admin, this.t.b.member];
	}
	private tenantOf(i: number): TenantName {
		return i < 2 ? "a" : "b";
	}
	private store(service: string, collection: string) {
		return (this.t.p.broker.getLocalService(service) as any).collectionStore(collection);
	}
	private tenantOfClients(clients: unknown): TenantName {
		const first = Array.isArray(clients) ? clients[0] : undefined;
		return first === this.t.a.client.id ? "a" : first === this.t.b.client.id ? "b" : "root";
	}
	/** Wallets not deleted, by id. */
	private live(): string[] {
		return [...this.wallets.keys()].filter((id) => !this.wallets.get(id)!.deleted).sort();
	}
	/** Live wallets the run made that pass `keep`, in the order it made them. */
	private madeLive(keep: (w: MWallet) => boolean): string[] {
		return this.made.filter((id) => this.wallets.has(id) && !this.wallets.get(id)!.deleted && keep(this.wallets.get(id)!));
	}
	/** A wallet of `tenant` (or, foreign, of another tenant or the operator's); `made`: one the run made, when there is one. */
	private wallet(tenant: TenantName, p: Pick): string {
		const inTenant = (w: MWallet) => (w.tenant === tenant) !== p.foreign;
		const made = p.made ? this.madeLive(inTenant) : [];
		const all = made.length ? made : this.live().filter((id) => inTenant(this.wallets.get(id)!));
		return all[p.i % all.length];
	}
	/** A wallet the user owns (its own, or one it made): the payer side of its transfers. */
	private ownWallet(by: number, i: number, made = false): string {
		const own = (w: MWallet) => w.owner === this.users[by].id;
		const fresh = made ? this.madeLive(own) : [];
		const mine = fresh.length ? fresh : this.live().filter((id) => own(this.wallets.get(id)!));
		return mine[i % mine.length];
	}
	private fresh(): number {
		return ++this.revs;
	}
	/** The wallet's content changed (no stage of any saga can be undone over it now). */
	private changed(wallet: string): void {
		const w = this.wallets.get(wallet);
		if (w) w.rev = this.fresh();
	}
	private move(wallet: string, by: number): void {
		this.wallets.get(wallet)!.balance += by;
		this.changed(wallet);
	}

	async begin(): Promise<void> {
		const docs: StoredDoc[] = await this.store("financial", "wallets").find({ query: {} });
		for (const d of docs) {
			const owner = String(d.owner);
			const balance = (d.balance as number | undefined) ?? 0;
			this.wallets.set(d.id, { tenant: this.tenantOfClients(d.clients), owner, balance, deleted: !!d.deleted_at, platform: d.id === walletIdOf(owner), rev: this.fresh() });
		}
		this.last = new Map(docs.map((d) => [d.id, (d.balance as number | undefined) ?? 0]));
		this.start = new Map(this.last);
		this.base = [...this.last.values()].reduce((a, b) => a + b, 0);
	}

	async step(s: Step): Promise<void> {
		this.log.push(JSON.stringify(s));
		saw(`step ${s.k}`);
		const acting = await this.run(s);
		await this.check(acting, JSON.stringify(s));
	}

	/** Settles what the run left open (pending transactions verified, sagas in flight committed), then checks. */
	async end(): Promise<void> {
		for (const tx of this.txs) if (tx.state === "PENDING") await this.settle(tx, "verify", 1);
		for (const s of this.sagas) if (s.state === "AWAITING") await this.endSaga(s, "commit", 1);
		await this.check(null, "end of run");
		for (const tx of this.txs) must(tx.state !== "PENDING", `transaction ${tx.id} still PENDING at the end`);
	}

	/** Runs one step; answers the tenant that may have changed wallets (null: none may). */
	private async run(s: Step): Promise<TenantName | null> {
		switch (s.k) {
			case "deposit":
				return this.deposit(s);
			case "withdraw":
				return this.withdraw(s);
			case "transfer":
				return this.transfer(s);
			case "settle": {
				if (!this.txs.length) return null;
				const tx = this.txs[s.tx % this.txs.length];
				await this.settle(tx, s.how, s.repeat);
				return this.tenantOf(tx.by);
			}
			case "invoice":
				return this.invoice(s);
			case "sagaStart":
				return this.startSaga(s);
			case "sagaMove": {
				const saga = this.inFlight(s.saga);
				if (!saga) return null;
				const by = saga.by < 2 ? 0 : 2;
				const to = this.stagedWallet(saga);
				const r = await this.init(by, { type: "DEPOSIT", amount: s.amount, payees: [{ wallet: to, amount: s.amount }] });
				// The wallet the saga created may be deleted or destroyed since.
				if (!this.wallets.has(to) || this.wallets.get(to)!.deleted) refused(r, 404, `wallet ${to} not found`);
				else await this.then(this.record(r, by, "DEPOSIT", [], [{ wallet: to, amount: s.amount }]), s.then);
				return this.tenantOf(by);
			}
			case "walletNew": {
				const u = this.users[s.by];
				const w = answered(await this.t.as(u.token, "POST", "/financial/wallets", { user: u.id, currency: WALLET_CURRENCY }), "new wallet");
				this.wallets.set(w.id, { tenant: this.tenantOf(s.by), owner: u.id, balance: 0, deleted: false, platform: false, rev: this.fresh() });
				this.made.push(w.id);
				return this.tenantOf(s.by);
			}
			case "walletOp":
				return this.walletOp(s);
			case "sagaEnd": {
				// Mostly a saga in flight (ending one already ended is the rarer case).
				const saga = (s.saga % 4 !== 0 ? this.inFlight(s.saga) : undefined) ?? this.sagas[s.saga % Math.max(1, this.sagas.length)];
				if (!saga) return null;
				await this.endSaga(saga, s.how, s.repeat);
				return this.tenantOf(saga.by);
			}
		}
	}

	private init(by: number, body: unknown): Promise<HttpResult> {
		return this.t.as(this.users[by].token, "POST", "/financial/transactions/init", body);
	}

	private record(r: HttpResult, by: number, type: MTx["type"], payers: Leg[], payees: Leg[]): MTx {
		const d = answered(r, `${type} init`);
		must(d.state === "PENDING" && d.type === type, `${type} init answered ${said(r)}`);
		for (const l of payers) this.move(l.wallet, -l.amount);
		for (const l of payees) this.move(l.wallet, l.amount);
		const tx: MTx = { id: d.id, saga: d.saga, type, by, payers, payees, state: "PENDING" };
		saw(`${type} PENDING`);
		this.txs.push(tx);
		return tx;
	}

	private async deposit(s: Extract<Step, { k: "deposit" }>): Promise<TenantName> {
		const by = s.by * 2;
		const to = this.wallet(this.tenantOf(by), s.to);
		const r = await this.init(by, { type: "DEPOSIT", amount: s.amount, payees: [{ wallet: to, amount: s.amount }] });
		if (this.wallets.get(to)!.tenant !== this.tenantOf(by)) refused(r, 404, `wallet ${to} not found`);
		else await this.then(this.record(r, by, "DEPOSIT", [], [{ wallet: to, amount: s.amount }]), s.then);
		return this.tenantOf(by);
	}

	private async withdraw(s: Extract<Step, { k: "withdraw" }>): Promise<TenantName> {
		const by = s.by * 2;
		// Mostly the admin's own wallets (its write view), now and then any other.
		const mine = this.live().filter((id) => (this.wallets.get(id)!.owner === this.users[by].id) !== s.from.foreign);
		const from = mine[s.from.i % mine.length];
		const w = this.wallets.get(from)!;
		const r = await this.init(by, { type: "WITHDRAW", amount: s.amount, payers: [{ wallet: from, amount: s.amount }] });
		// The payer side is the caller's write view in its default zones: its own wallets.
		if (w.owner !== this.users[by].id) refused(r, 404, `wallet ${from} not found`);
		else if (w.balance < s.amount) refused(r, 409, "insufficient balance");
		else await this.then(this.record(r, by, "WITHDRAW", [{ wallet: from, amount: s.amount }], []), s.then);
		return this.tenantOf(by);
	}

	private async transfer(s: Extract<Step, { k: "transfer" }>): Promise<TenantName> {
		const from = this.ownWallet(s.by, s.from, s.fromMade);
		const to = this.wallet(this.tenantOf(s.by), s.to);
		// A transfer to itself credits back what it took: concurrent repeats would race on the same balance.
		const times = from === to ? 1 : s.repeat;
		const body = { amount: s.amount, payers: [{ wallet: from, amount: s.amount }], payees: [{ wallet: to, amount: s.amount }] };
		const rs = await Promise.all(Array.from({ length: times }, () => this.init(s.by, body)));
		if (this.wallets.get(to)!.tenant !== this.tenantOf(s.by)) {
			saw("transfer to another tenant refused");
			for (const r of rs) refused(r, 404, `wallet ${to} not found`);
			return this.tenantOf(s.by);
		}
		const fit = Math.min(times, Math.floor(this.wallets.get(from)!.balance / s.amount));
		const okd = rs.filter((r) => r.status === 200);
		if (okd.length < times) saw(`transfer refused: insufficient balance${times > 1 ? " (concurrent)" : ""}`);
		must(okd.length === fit, `${fit} of ${times} concurrent transfers should fit, answers: ${rs.map(said).join(" / ")}`);
		for (const r of rs) if (r.status !== 200) refused(r, 409, "insufficient balance");
		const txs = okd.map((r) => this.record(r, s.by, "TRANSFER", body.payers, body.payees));
		for (const tx of txs) await this.then(tx, s.then);
		return this.tenantOf(s.by);
	}

	private async then(tx: MTx, how: Then): Promise<void> {
		if (how !== "keep") await this.settle(tx, how, 1);
	}

	/** Whether aborting `tx` now takes every credit back (else: a payee spent it, the transfer stands). */
	private reversible(tx: MTx): boolean {
		const need = new Map<string, number>();
		for (const l of tx.payees) need.set(l.wallet, (need.get(l.wallet) ?? 0) + l.amount);
		return [...need].every(([w, a]) => this.wallets.get(w)!.balance >= a);
	}

	private undo(tx: MTx): void {
		for (const l of tx.payees) this.move(l.wallet, -l.amount);
		for (const l of tx.payers) this.move(l.wallet, l.amount);
	}

	private async settle(tx: MTx, how: "verify" | "abort" | "expire", times: number): Promise<void> {
		if (how === "expire") {
			if (tx.state !== "PENDING") return;
			const back = this.reversible(tx);
			await this.expire(tx.saga);
			const doc = await waitForValue(
				`transaction ${tx.id} settled by expiry`,
				async () => {
					const d = await this.store("financial", "transactions").findOne({ id: tx.id });
					return d && d.state !== "PENDING" ? d : null;
				},
				20_000,
			);
			must(doc.state === (back ? "FAILED" : "VERIFIED"), `expired transaction ${tx.id}: expected ${back ? "FAILED" : "VERIFIED"}, got ${doc.state}`);
			if (back) this.undo(tx);
			tx.state = doc.state;
			saw(`transaction expired → ${doc.state}`);
			return;
		}
		const token = this.users[tx.by].token;
		const rs = await Promise.all(Array.from({ length: times }, () => this.t.as(token, "GET", `/financial/transactions/${tx.id}/${how}`)));
		const want: TxState = how === "verify" ? "VERIFIED" : "CANCELLED";
		if (tx.state === want || (tx.state === "PENDING" && (how === "verify" || this.reversible(tx)))) {
			for (const r of rs) must(answered(r, `${how} ${tx.id}`).state === want, `${how} ${tx.id}: ${said(r)}`);
			if (tx.state === "PENDING" && how === "abort") this.undo(tx);
			// A commit drops the moves' tags from the wallets.
			if (tx.state === "PENDING" && how === "verify") for (const l of [...tx.payers, ...tx.payees]) this.changed(l.wallet);
			if (tx.state === "PENDING") saw(`transaction ${how} → ${want}${times > 1 ? " (concurrent)" : ""}`);
			tx.state = want;
		} else if (tx.state === "PENDING") {
			// A payee already spent its credit: the transfer stands.
			for (const r of rs) refused(r, 409, [`transaction ${tx.id} cannot be cancelled: a payee already spent its credit`, `transaction ${tx.id} is verified`]);
			tx.state = "VERIFIED";
			saw("abort refused: credit spent");
		} else for (const r of rs) refused(r, 409, `transaction ${tx.id} is ${tx.state.toLowerCase()}`);
	}

	private async invoice(s: Extract<Step, { k: "invoice" }>): Promise<TenantName> {
		const owner = this.users[s.owner];
		// A user of the owner's tenant, or now and then of the other one.
		const payerIndex = s.owner < 2 !== s.payer.foreign ? s.payer.i % 2 : 2 + (s.payer.i % 2);
		const payer = this.users[payerIndex];
		const same = this.tenantOf(s.owner) === this.tenantOf(payerIndex);
		const inv = answered(
			await this.t.as(owner.token, "POST", "/financial/invoices", {
				amount: s.amount,
				currency: WALLET_CURRENCY,
				status: "ISSUED",
				...(same && owner !== payer ? { shares: [payer.id] } : {}),
			}),
			"invoice",
		);
		const from = walletIdOf(payer.id);
		const to = walletIdOf(owner.id);
		const body = { wallet: from, ...(s.pin === "right" ? { amount: s.amount } : s.pin === "wrong" ? { amount: s.amount + 1 } : {}) };
		const rs = await Promise.all(Array.from({ length: s.repeat }, () => this.t.as(payer.token, "POST", `/financial/invoices/${inv.id}/payment`, body)));
		const paid = rs.filter((r) => r.status === 200);
		if (!same) for (const r of rs) refused(r, 404, "document not found");
		else if (s.pin === "wrong") for (const r of rs) refused(r, 409, `invoice ${inv.id} amount is ${s.amount}, not ${s.amount + 1}`);
		else if (this.wallets.get(from)!.balance >= s.amount) {
			must(paid.length === 1, `one of ${s.repeat} concurrent payments pays, answers: ${rs.map(said).join(" / ")}`);
			for (const r of rs) if (r !== paid[0]) refused(r, 409, `invoice ${inv.id} is already paid`);
			const d = paid[0].body.data;
			must(d.status === "PAID" && typeof d.transaction === "string", `payment answered ${said(paid[0])}`);
			this.move(from, -s.amount);
			this.move(to, s.amount);
			saw(`invoice paid${s.repeat > 1 ? " (concurrent)" : ""}`);
			const stored = await this.store("financial", "transactions").findOne({ id: d.transaction });
			this.txs.push({
				id: d.transaction,
				saga: stored.saga,
				type: "TRANSFER",
				by: payerIndex,
				payers: [{ wallet: from, amount: s.amount }],
				payees: [{ wallet: to, amount: s.amount }],
				state: "VERIFIED",
			});
		} else {
			for (const r of rs) refused(r, 409, ["insufficient balance", `invoice ${inv.id} is already paid`]);
			must(
				rs.some((r) => r.body?.message === "insufficient balance"),
				"an unaffordable payment answers insufficient balance",
			);
		}
		if (paid.length === 0) {
			const now = answered(await this.t.as(owner.token, "GET", `/financial/invoices/${inv.id}`), "invoice");
			must(now.status === "ISSUED" && now.paid_at === undefined, `an unpaid invoice stays ISSUED: ${JSON.stringify(now)}`);
		}
		return this.tenantOf(payerIndex);
	}

	private async startSaga(s: Extract<Step, { k: "sagaStart" }>): Promise<TenantName> {
		const u = this.users[s.by];
		const saga = answered(await this.t.as(u.token, "POST", "/essential/sagas/start", { ttl: 900 }), "saga start");
		const headers = { "x-saga-session": saga.id };
		const m: MSaga = { id: saga.id, by: s.by, state: "AWAITING", balanceAtStage: this.wallets.get(walletIdOf(u.id))?.balance, stages: [] };
		if (s.stage === "patch") {
			const id = walletIdOf(u.id);
			answered(await this.t.as(u.token, "PATCH", `/financial/wallets/${id}`, { description: `staged ${++this.n}` }, headers), "staged patch");
			this.staged(m, id, "update");
		} else if (s.stage === "create") {
			const w = answered(await this.t.as(u.token, "POST", "/financial/wallets", { user: u.id, currency: WALLET_CURRENCY }, headers), "staged wallet");
			this.wallets.set(w.id, { tenant: this.tenantOf(s.by), owner: u.id, balance: 0, deleted: false, platform: false, rev: 0 });
			this.made.push(w.id);
			this.staged(m, w.id, "create");
			m.created = w.id;
			m.balanceAtStage = 0;
		}
		this.sagas.push(m);
		return this.tenantOf(s.by);
	}

	/** A staged write of `wallet` by saga `m` happened: its content is new, and the stage remembers both. */
	private staged(m: MSaga, wallet: string, kind: MStage["kind"]): void {
		const w = this.wallets.get(wallet) ?? this.gone.get(wallet)!;
		const stage: MStage = { wallet, kind, before: w.rev, after: this.fresh(), deletedBefore: w.deleted };
		w.rev = stage.after;
		m.stages.push(stage);
	}

	/**
	 * A wallet delete, destroy or restore: answered as the rules say (404 outside the caller's view or in the wrong
	 * state; 409 naming the pending transaction, then the balance), staged in the actor's saga in flight when asked.
	 */
	private async walletOp(s: Extract<Step, { k: "walletOp" }>): Promise<TenantName | null> {
		const u = this.users[s.by];
		const own = (w: MWallet) => w.owner === u.id && !w.platform;
		const known = [...this.wallets.keys()];
		// Own: those it made in this run first, in order, then the others; foreign: anyone else's.
		const mine = [
			...this.made.filter((id) => this.wallets.has(id) && own(this.wallets.get(id)!)),
			...known.filter((id) => !this.made.includes(id) && own(this.wallets.get(id)!)).sort(),
		];
		const others = known.filter((id) => this.wallets.get(id)!.owner !== u.id).sort();
		const pool = s.target.foreign ? others : mine;
		if (!pool.length) return null;
		const id = pool[s.target.i % pool.length];
		const w = this.wallets.get(id)!;
		const saga = s.inSaga ? this.sagas.filter((x) => x.state === "AWAITING" && x.by === s.by).pop() : undefined;
		const path = `/financial/wallets/${id}${s.op === "destroy" ? "/destroy" : s.op === "restore" ? "/restore" : ""}`;
		const r = await this.t.as(u.token, s.op === "restore" ? "PUT" : "DELETE", path, undefined, saga ? { "x-saga-session": saga.id } : undefined);
		const where = `${s.op}${saga ? " in a saga" : ""}`;
		if (s.target.foreign || (s.op === "delete" && w.deleted) || (s.op === "restore" && !w.deleted)) {
			refused(r, 404, "document not found");
			saw(`wallet ${where} refused: not found`);
			return this.tenantOf(s.by);
		}
		if (s.op !== "restore") {
			const pending = this.txs
				.filter((tx) => tx.state === "PENDING" && [...tx.payers, ...tx.payees].some((l) => l.wallet === id))
				.map((tx) => tx.id)
				.sort();
			if (pending.length) {
				refused(r, 409, `wallet ${id} takes part in pending transaction ${pending[0]}`);
				saw(`wallet ${where} refused: pending transaction`);
				return this.tenantOf(s.by);
			}
			if (w.balance !== 0) {
				refused(r, 409, `wallet ${id} holds a balance of ${w.balance}; move it out before ${s.op === "delete" ? "deleting" : "destroying"} the wallet`);
				saw(`wallet ${where} refused: balance`);
				return this.tenantOf(s.by);
			}
		}
		answered(r, `wallet ${where}`);
		saw(`wallet ${where}`);
		if (saga) this.staged(saga, id, s.op === "destroy" ? "destroy" : "update");
		else this.changed(id);
		if (s.op === "destroy") {
			this.wallets.delete(id);
			this.gone.set(id, w);
		} else w.deleted = s.op === "delete";
		return this.tenantOf(s.by);
	}

	private async endSaga(s: MSaga, how: "commit" | "abort" | "expire", times: number): Promise<void> {
		const was = s.state;
		if (how === "expire") {
			if (s.state !== "AWAITING") return;
			await this.expire(s.id);
			await waitForValue(`saga ${s.id} expired`, async () => (await this.store("essential", "sagas").findOne({ id: s.id }))?.state === "ABORTED", 20_000);
			s.state = "ABORTED";
		} else {
			const token = this.users[s.by].token;
			const rs = await Promise.all(Array.from({ length: times }, () => this.t.as(token, "GET", `/essential/sagas/${s.id}/${how}`)));
			const want: SagaState = how === "commit" ? "COMMITTED" : "ABORTED";
			if (s.state === "AWAITING" || s.state === want) {
				for (const r of rs) must(answered(r, `${how} saga`).state === want, `${how} saga ${s.id}: ${said(r)}`);
				s.state = want;
			} else for (const r of rs) must(r.status === 409, `${how} of a ${s.state} saga: expected 409, got ${said(r)}`);
		}
		if (was === "AWAITING" && s.state === "ABORTED") {
			saw(`saga aborted (${how})${s.created ? ", a staged wallet" : ", a staged patch"}${this.touchedSince(s) ? " moved since" : ""}`);
			this.compensate(s);
		}
	}

	/**
	 * The model of compensation, newest stage first: a stage is undone only while its wallet has the content the stage
	 * left; a destroyed wallet comes back as it was (it held nothing: the rules let no other be destroyed).
	 */
	private compensate(s: MSaga): void {
		for (const st of [...s.stages].reverse()) {
			const w = this.wallets.get(st.wallet);
			if (st.kind === "destroy") {
				const was = this.gone.get(st.wallet);
				if (w || !was) continue;
				this.gone.delete(st.wallet);
				this.wallets.set(st.wallet, { ...was, rev: st.before });
				saw(`staged destroy undone${was.deleted ? " (a deleted wallet)" : ""}`);
			} else if (!w || w.rev !== st.after) saw(`staged ${st.kind} left: changed since`);
			else if (st.kind === "create") {
				this.wallets.delete(st.wallet);
				saw("staged create undone");
			} else {
				if (w.deleted !== st.deletedBefore) saw(st.deletedBefore ? "staged delete undone" : "staged restore undone");
				w.rev = st.before;
				w.deleted = st.deletedBefore!;
			}
		}
	}

	private inFlight(i: number): MSaga | undefined {
		const open = this.sagas.filter((x) => x.state === "AWAITING");
		return open.length ? open[i % open.length] : undefined;
	}

	/** The wallet the saga's stage wrote: the one it created, or its user's own (patched). */
	private stagedWallet(s: MSaga): string {
		return s.created ?? walletIdOf(this.users[s.by].id);
	}

	/** Whether money moved in the wallet the saga staged since the stage. */
	private touchedSince(s: MSaga): boolean {
		return (this.wallets.get(this.stagedWallet(s))?.balance ?? 0) !== (s.balanceAtStage ?? 0);
	}

	/** The saga is due now; the watcher's scan runs at once. */
	private async expire(saga: string): Promise<void> {
		await this.store("essential", "sagas").updateIf({ id: saga }, { $set: { expires_at: PAST } });
		await this.t.p.broker.call("essential.sagas.expire", { limit: 100 }, { meta: {} });
	}

	private async check(acting: TenantName | null, what: string): Promise<void> {
		const where = `after ${what}`;
		const docs: StoredDoc[] = await this.store("financial", "wallets").find({ query: {} });
		const now = new Map(docs.map((d) => [d.id, (d.balance as number | undefined) ?? 0]));
		for (const d of docs) must(((d.balance as number | undefined) ?? 0) >= 0, `${where}: wallet ${d.id} has balance ${d.balance}`);
		for (const [id, w] of this.wallets) must(now.get(id) === w.balance, `${where}: wallet ${id} (${w.tenant}) holds ${now.get(id)}, the model ${w.balance}`);
		for (const d of docs) must(this.wallets.has(d.id), `${where}: a wallet the model does not know: ${JSON.stringify(d)}`);
		for (const d of docs)
			must(
				!!d.deleted_at === this.wallets.get(d.id)!.deleted,
				`${where}: wallet ${d.id} deleted_at ${d.deleted_at}, the model ${this.wallets.get(d.id)!.deleted ? "deleted" : "live"}`,
			);
		for (const id of this.gone.keys()) must(!now.has(id), `${where}: wallet ${id} is there, the model destroyed it`);
		for (const [id, b] of now) {
			const tenant = this.wallets.get(id)!.tenant;
			if (b !== (this.last.get(id) ?? 0)) must(tenant === acting, `${where}: wallet ${id} of tenant ${tenant} changed (${this.last.get(id)} → ${b}) by tenant ${acting}`);
		}
		this.last = now;
		// Money enters with deposits and leaves with withdrawals (PENDING or VERIFIED); nothing else changes the sum.
		const stored: StoredDoc[] = this.txs.length ? await this.store("financial", "transactions").find({ query: { id: { $in: this.txs.map((x) => x.id) } } }) : [];
		const byId = new Map(stored.map((d) => [d.id, d]));
		let net = 0;
		const moved = new Map<string, number>();
		const add = (legs: unknown, sign: number) => {
			for (const l of (legs as Leg[] | undefined) ?? []) moved.set(l.wallet, (moved.get(l.wallet) ?? 0) + sign * l.amount);
		};
		for (const tx of this.txs) {
			const d = byId.get(tx.id);
			must(d, `${where}: transaction ${tx.id} is not stored`);
			must(d.state === tx.state, `${where}: transaction ${tx.id} is ${d.state}, the model ${tx.state}`);
			for (const [state, field] of Object.entries(DATES))
				if (field) must((d[field] !== undefined && d[field] !== null) === (state === d.state), `${where}: transaction ${tx.id} ${d.state} with ${field} = ${d[field]}`);
			const counts = d.state === "PENDING" || d.state === "VERIFIED";
			if (counts && d.type === "DEPOSIT") net += d.amount as number;
			if (counts && d.type === "WITHDRAW") net -= d.amount as number;
			if (counts) {
				add(d.payers, -1);
				add(d.payees, 1);
			}
		}
		const sum = [...now.values()].reduce((a, b) => a + b, 0);
		must(sum - this.base === net, `${where}: the sum of balances moved by ${sum - this.base}, deposits and withdrawals by ${net}`);
		// Every balance is explained by the transactions naming its wallet; a destroyed wallet counts as holding nothing.
		for (const id of new Set([...now.keys(), ...this.gone.keys(), ...moved.keys()])) {
			const delta = (now.get(id) ?? 0) - (this.start.get(id) ?? 0);
			must(delta === (moved.get(id) ?? 0), `${where}: wallet ${id} moved by ${delta}, its transactions by ${moved.get(id) ?? 0}`);
		}
		for (const s of this.sagas) {
			const d = await this.store("essential", "sagas").findOne({ id: s.id });
			must(d?.state === s.state, `${where}: saga ${s.id} is ${d?.state}, the model ${s.state}`);
			for (const [state, field] of Object.entries(SAGA_DATES))
				if (field) must((d[field] !== undefined && d[field] !== null) === (state === d.state), `${where}: saga ${s.id} ${d.state} with ${field} = ${d[field]}`);
		}
	}
}

describe("money invariants on PostgreSQL (model-based)", () => {
	let t: Tenancy;

	beforeAll(async () => {
		t = await bootTenancy();
		const fin = t.p.broker.getLocalService("financial") as any;
		const ids = [t.a.admin, t.a.member, t.b.admin, t.b.member, { id: t.p.root.user_id }].map((u) => walletIdOf(u.id));
		await waitForValue("the platform's wallets", async () => (await Promise.all(ids.map((id) => fin.collectionStore("wallets").findOne({ id })))).every(Boolean), 30_000);
		// Members may start and settle transactions, pay, and run sagas (their admin grants it within its domain).
		const specials = [
			["init", "financial:transactions"],
			["verify", "financial:transactions"],
			["payment", "financial:invoices"],
			["start", "essential:sagas"],
			["commit", "essential:sagas"],
			["abort", "essential:sagas"],
		];
		for (const tn of [t.a, t.b]) for (const [action, object] of specials) await t.grant(tn.admin.token, { subject: `@editor@${tn.domain}`, action, object });
	}, 180_000);

	afterAll(async () => {
		await t?.cleanup();
	});
	withStatusProbe(() => t.p.url);

	test("balances never below zero, the sum moves only by deposits and withdrawals, tenants apart, one state per transaction", async () => {
		const started = Date.now();
		let runs = 0;
		let current: Run | undefined;
		const seed = process.env.MONEY_SEED ? Number(process.env.MONEY_SEED) : undefined;
		const property = fc.asyncProperty(fc.array(STEP, { minLength: 1, maxLength: MAX_STEPS }), async (steps) => {
			runs++;
			current = new Run(t);
			await current.begin();
			for (const s of steps) await current.step(s);
			await current.end();
		});
		try {
			await fc.assert(property, { numRuns: RUNS, endOnFailure: true, examples: EXAMPLES, ...(seed !== undefined ? { seed, path: process.env.MONEY_PATH } : {}) });
		} catch (err) {
			const cause = (err as { cause?: { message?: string } }).cause?.message;
			throw new Error(`${(err as Error).message}\n${cause ? `failure: ${cause}\n` : ""}steps of the failing run:\n${current?.log.join("\n")}`, { cause: err });
		}

		console.log(
			`money invariants: ${runs} runs in ${Date.now() - started} ms\n${[...seen]
				.sort()
				.map(([k, v]) => `${v}\t${k}`)
				.join("\n")}`,
		);
		seen.clear();
		expect(runs).toBeGreaterThanOrEqual(RUNS);
		await ok(t.as(t.a.admin.token, "GET", "/financial/wallets"), "still answering");
	});
});
