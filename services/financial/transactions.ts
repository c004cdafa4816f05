/**
 * Financial transactions and payments on sagas (docs/contracts.md "Financial transactions and payments").
 *
 * `init` starts a saga and records two stages before touching anything (write-ahead): the transaction's state
 * (decided by the saga's end: commit → VERIFIED, abort → CANCELLED, expiry → FAILED) and the balance moves. Each
 * move is a compare-and-set on the wallet (`balance >= amount` in the update's condition, so concurrent transfers
 * from one wallet never overdraw it, on any number of nodes) tagged with an op id in the wallet's `saga_ops`: the
 * compensation reverses a move only while its tag is there, so at most once. A move that does not fit undoes the
 * moves already made and answers 409 `insufficient balance`; the saga is aborted and no transaction is stored.
 *
 * Every wallet a transaction touches is in the caller's view (payers: its write view; payees: what it can GET, see
 * ./wallets.ts), else 404 as for a foreign id; all of them hold the transaction's currency (400 otherwise). What it
 * uses of them (a payer's balance and currency, a payee's currency), and what a payment uses of its invoice (status,
 * amount, currency), the caller's grants must let it read: 403 otherwise (../caller-view.ts).
 */
import { randomBytes } from "crypto";
import { TRANSACTION_TYPES, financial } from "../../catalog/domains/financial";
import { objectId } from "../../lib/crypto";
import { badRequest, conflict, notFound } from "../../lib/errors";
import { requirePlan } from "../../lib/plan";
import { present } from "../../lib/present";
import { isPlainObject } from "../../lib/validate";
import { callerView } from "../../authority/authority";
import { platformDoc, type Change, type CollectionHooks, type Ctx } from "../../engine/collection.mixin";
import { settle, type Image } from "../../engine/saga-staging";
import type { DocumentStore, StoredDoc } from "../../stores";
import { identityOf } from "../../lib/types";
import { userWallet } from "./wallets";
import { assertInView, refuseHiddenUse } from "../caller-view";
import { flushUnit } from "../../stores/unit";

const TRANSACTIONS = financial.collections.find((c) => c.name === "transactions")!;
const INVOICES = financial.collections.find((c) => c.name === "invoices")!;
const OBJECT_ID = /^[0-9a-f]{24}$/i;
const DEFAULT_TTL = 300;

type Svc = { collectionStore(name: string): DocumentStore; recordChanges(ctx: Ctx, name: string, changes: Change[]): Promise<void> };
/** A saga stage as essential's saga-stages.begin answers it. */
type Stage = { stage: string; lease: string };
/** Calls made for the saga carry no request headers (no x-saga-session: they are the saga's own bookkeeping). */
const OWN_CALL = { meta: { headers: {} } };
interface Leg {
	wallet: string;
	amount: number;
}

/** An amount in minor units: a positive safe integer. */
const isAmount = (v: unknown): v is number => typeof v === "number" && Number.isSafeInteger(v) && v >= 1;

function legs(name: string, v: unknown): Leg[] {
	if (v === undefined || v === null) return [];
	if (!Array.isArray(v)) throw badRequest(`${name} must be an array`);
	if (v.length > 100) throw badRequest(`${name} accepts at most 100 entries`);
	return v.map((x, i) => {
		if (!isPlainObject(x)) throw badRequest(`${name}[${i}] must be an object { wallet, amount }`);
		const extra = Object.keys(x).find((k) => k !== "wallet" && k !== "amount");
		if (extra) throw badRequest(`${name}[${i}].${extra} is not allowed`);
		if (typeof x.wallet !== "string" || !OBJECT_ID.test(x.wallet)) throw badRequest(`${name}[${i}].wallet must be a wallet id`);
		if (!isAmount(x.amount)) throw badRequest(`${name}[${i}].amount must be a positive integer (minor units)`);
		return { wallet: x.wallet.toLowerCase(), amount: x.amount };
	});
}

const sum = (l: Leg[]) => l.reduce((a, b) => a + b.amount, 0);

export interface InitBody {
	amount: number;
	currency?: string;
	type: (typeof TRANSACTION_TYPES)[number];
	payers: Leg[];
	payees: Leg[];
	ttl: number;
}

export function parseInit(body: unknown): InitBody {
	if (!isPlainObject(body)) throw badRequest("body must be a JSON object");
	const extra = Object.keys(body).find((k) => !["amount", "currency", "type", "payers", "payees", "ttl"].includes(k));
	if (extra) throw badRequest(`${extra} is not allowed`);
	const { amount, currency } = body;
	if (!isAmount(amount)) throw badRequest("amount must be a positive integer (minor units)");
	if (currency !== undefined && (typeof currency !== "string" || currency.length > 10)) throw badRequest("currency must be a string of at most 10 characters");
	const type = (body.type ?? "TRANSFER") as InitBody["type"];
	if (!TRANSACTION_TYPES.includes(type)) throw badRequest(`type must be one of ${TRANSACTION_TYPES.join(", ")}`);
	const payers = legs("payers", body.payers);
	const payees = legs("payees", body.payees);
	if (type === "DEPOSIT" && payers.length) throw badRequest("a DEPOSIT has payees only");
	if (type === "WITHDRAW" && payees.length) throw badRequest("a WITHDRAW has payers only");
	if (type !== "DEPOSIT" && sum(payers) !== amount) throw badRequest("payers must sum to amount");
	if (type !== "WITHDRAW" && sum(payees) !== amount) throw badRequest("payees must sum to amount");
	const ttl = body.ttl ?? DEFAULT_TTL;
	return { amount, currency: currency as string | undefined, type, payers, payees, ttl: ttl as number };
}

/** What a transaction uses of its wallets: a debit is checked against the payer's balance, every leg's currency. */
const PAYER_USES = ["balance", "currency"];
const PAYEE_USES = ["currency"];

/**
 * Runs init for the caller (`action`: the special it runs for, `init` or `payment`, named in a 403): answers the
 * stored transaction (PENDING).
 */
export async function initTransaction(svc: Svc, ctx: Ctx, b: InitBody, action = "init"): Promise<StoredDoc> {
	const wallets = svc.collectionStore("wallets");
	if (b.type !== "TRANSFER") await callerView(ctx, "financial", "wallets", "manage");
	// Every payer wallet must be in the caller's write view, every payee in its read view (404 as for a foreign id),
	// and what the transaction uses of them in the field lists of those views (403: a 409 on a hidden balance tells it).
	const uses = (grant: string, fields: string[]) => ({ action, grant, object: "financial:wallets", fields });
	const touched: StoredDoc[] = [];
	for (const l of b.payers) {
		const plan = await callerView(ctx, "financial", "wallets", "write", l.wallet);
		const w = await wallets.findOne(plan.filter);
		if (!w) throw notFound(`wallet ${l.wallet} not found`);
		refuseHiddenUse(plan, uses("write", PAYER_USES));
		touched.push(w);
	}
	for (const l of b.payees) {
		await assertInView(ctx, "financial.wallets", l.wallet, "wallet");
		const w = await wallets.findOne({ id: l.wallet, deleted_at: null });
		if (!w) throw notFound(`wallet ${l.wallet} not found`);
		touched.push(w);
	}
	if (b.payees.length) refuseHiddenUse(await callerView(ctx, "financial", "wallets", "read"), uses("read", PAYEE_USES));
	// One currency: the body's, else the first wallet's; every wallet holds it.
	const currency = b.currency ?? (touched[0]?.currency as string | undefined);
	const named = (c: unknown) => (c === undefined || c === null ? "no currency" : String(c));
	for (const w of touched) if ((w.currency ?? undefined) !== currency) throw badRequest(`wallet ${w.id} holds ${named(w.currency)}, not ${named(currency)}`);

	const saga = (await ctx.call("essential.sagas.open", { ttl: b.ttl })) as StoredDoc;
	const id = objectId();
	const stateImage: Image = {
		kind: "state",
		id,
		from: { state: "PENDING" },
		commit: { state: "VERIFIED", verified_at: "$now" },
		abort: { state: "CANCELLED", canceled_at: "$now" },
		expiry: { state: "FAILED", failed_at: "$now" },
		// A payee already spent its credit, or a wallet of the transfer is gone: nothing moves back, the transfer stands.
		conflict: { state: "VERIFIED", verified_at: "$now" },
	};
	const tag = randomBytes(6).toString("hex");
	const moves: Array<Extract<Image, { kind: "inc" }>> = [
		...b.payers.map((l, i) => ({ kind: "inc" as const, id: l.wallet, field: "balance", by: -l.amount, op: `${saga.id}:${tag}:p${i}` })),
		...b.payees.map((l, i) => ({ kind: "inc" as const, id: l.wallet, field: "balance", by: l.amount, op: `${saga.id}:${tag}:r${i}` })),
	];
	const req = { body: { amount: b.amount, currency: b.currency, type: b.type, payers: b.payers, payees: b.payees } };
	const call = (action: string, params: unknown) => ctx.call<Stage, unknown>(action, params, OWN_CALL);

	// Stage 1: the transaction's state; stage 2: the balance moves. Both recorded before anything changes.
	const s1 = await call("essential.saga-stages.begin", { saga: saga.id, bucket: "financial/transactions", action: "INSERT_MANY", req, images: [stateImage] });
	await call("essential.saga-stages.complete", { stage: s1.stage, lease: s1.lease, res: { id } });
	const s2 = await call("essential.saga-stages.begin", { saga: saga.id, bucket: "financial/wallets", action: "UPDATE_MANY", req, images: moves });
	const record = (changes: Change[]) => svc.recordChanges(ctx, "wallets", changes);
	const done: typeof moves = [];
	let short = false;
	try {
		for (const m of moves) {
			const cond: Record<string, unknown> = { id: m.id, deleted_at: null };
			if (m.by < 0) cond.balance = { $gte: -m.by };
			const after = await wallets.updateIf(cond, { $inc: { balance: m.by }, $push: { saga_ops: m.op } });
			if (!after) {
				short = true;
				break;
			}
			done.push(m);
			await record([{ op: "u", before: { ...after, balance: (after.balance as number) - m.by }, after }]);
		}
		if (short) await settle({ store: wallets, record }, done, "abort");
		else {
			const doc = platformDoc(
				{ amount: b.amount, ...(currency ? { currency } : {}), type: b.type, payers: b.payers, payees: b.payees, saga: saga.id, state: "PENDING" },
				{ owner: identityOf(ctx.meta.token!), cid: ctx.meta.token!.cid, aid: ctx.meta.token!.aid, coworkers: ctx.meta.token!.coworker?.split(" ").filter(Boolean) },
			);
			doc.id = id;
			await svc.collectionStore("transactions").insert(doc);
			await svc.recordChanges(ctx, "transactions", [{ op: "c", before: null, after: doc }]);
		}
	} finally {
		await call("essential.saga-stages.complete", { stage: s2.stage, lease: s2.lease, res: short ? null : { moved: moves.length } }).catch(() => undefined);
	}
	if (short) {
		await call("essential.sagas.finish", { id: saga.id, outcome: "abort" }).catch(() => undefined);
		throw conflict("insufficient balance");
	}
	return (await svc.collectionStore("transactions").findOne({ id }))!;
}

async function finishTransaction(svc: Svc, ctx: Ctx, tx: StoredDoc, outcome: "commit" | "abort"): Promise<StoredDoc> {
	const want = outcome === "commit" ? "VERIFIED" : "CANCELLED";
	if (tx.state === want) return tx;
	if (tx.state !== "PENDING") throw conflict(`transaction ${tx.id} is ${String(tx.state).toLowerCase()}`);
	await ctx.call("essential.sagas.finish", { id: tx.saga, outcome }, OWN_CALL);
	const after = (await svc.collectionStore("transactions").findOne({ id: tx.id }))!;
	if (after.state !== want) {
		// The moves stand: a wallet of the transaction is gone (its moves can be neither undone nor refunded), or a payee spent its credit.
		const ids = [...new Set([...((tx.payers as Leg[] | undefined) ?? []), ...((tx.payees as Leg[] | undefined) ?? [])].map((l) => l.wallet))];
		const found = new Set((await svc.collectionStore("wallets").find({ query: { id: { $in: ids } } })).map((w) => w.id));
		const gone = ids.find((id) => !found.has(id));
		throw conflict(`transaction ${tx.id} cannot be cancelled: ${gone ? `wallet ${gone} no longer exists` : "a payee already spent its credit"}`);
	}
	return after;
}

const outTx = (ctx: Ctx, doc: StoredDoc) => present(TRANSACTIONS, doc, ctx.locals?.plan ? requirePlan(ctx.locals).fields : null);

export const transactionHooks: CollectionHooks = {
	/** A raw create names a saga that exists and that its creator sees (400 otherwise). */
	async beforeCreate(ctx, doc) {
		const ok = await ctx.call("essential.sagas.visible", { id: doc.saga }, OWN_CALL);
		if (!ok) throw badRequest(`saga ${String(doc.saga)} does not exist`);
	},
	async beforePatch(ctx, set) {
		if (!("saga" in set)) return;
		const ok = await ctx.call("essential.sagas.visible", { id: set.saga }, OWN_CALL);
		if (!ok) throw badRequest(`saga ${String(set.saga)} does not exist`);
	},
	specials: {
		async init(ctx) {
			const svc = ctx.service as unknown as Svc;
			return { data: outTx(ctx, await initTransaction(svc, ctx, parseInit(ctx.params.body))) };
		},
		async verify(ctx) {
			const svc = ctx.service as unknown as Svc;
			const tx = await svc.collectionStore("transactions").findOne(requirePlan(ctx.locals).filter);
			if (!tx) throw notFound();
			return { data: outTx(ctx, await finishTransaction(svc, ctx, tx, "commit")) };
		},
		async abort(ctx) {
			const svc = ctx.service as unknown as Svc;
			const tx = await svc.collectionStore("transactions").findOne(requirePlan(ctx.locals).filter);
			if (!tx) throw notFound();
			return { data: outTx(ctx, await finishTransaction(svc, ctx, tx, "abort")) };
		},
	},
};

const PAID_BY_PLATFORM = "status PAID is set by the platform";
/** Fields a payment depends on: a paid invoice keeps them. */
const PAID_KEEPS = ["status", "amount", "currency"];

/** 409 when the invoice cannot be paid (paid, cancelled) or its amount is not the one the payer expects. */
function assertPayable(invoice: StoredDoc, expected: number | undefined): void {
	if (invoice.status === "PAID") throw conflict(`invoice ${invoice.id} is already paid`);
	if (invoice.status === "CANCELLED") throw conflict(`invoice ${invoice.id} is cancelled`);
	if (expected !== undefined && invoice.amount !== expected) throw conflict(`invoice ${invoice.id} amount is ${String(invoice.amount)}, not ${expected}`);
}

function parsePayment(body: unknown): { wallet: string; amount?: number } {
	if (!isPlainObject(body)) throw badRequest("body must be a JSON object");
	const extra = Object.keys(body).find((k) => k !== "wallet" && k !== "amount");
	if (extra) throw badRequest(`${extra} is not allowed`);
	if (typeof body.wallet !== "string" || !OBJECT_ID.test(body.wallet)) throw badRequest("wallet must be a wallet id");
	const { amount } = body;
	if (amount !== undefined && !isAmount(amount)) throw badRequest("amount must be a positive integer (minor units)");
	return { wallet: body.wallet, amount: amount as number | undefined };
}

/** A stored value as a condition: the same value, or absent. */
const same = (v: unknown) => (v === undefined ? { $exists: false } : v);

export const invoiceHooks: CollectionHooks = {
	/** `PAID` is the payment's to set (docs/contracts.md "Fields and bodies": platform-set values in a body answer 400). */
	beforeCreate(_ctx, doc) {
		if (doc.status === "PAID") throw badRequest(PAID_BY_PLATFORM);
	},
	/** A paid invoice keeps its status, amount and currency: reopened, it could be paid twice. */
	async beforePatch(ctx, set, before) {
		if (set.status === "PAID") throw badRequest(PAID_BY_PLATFORM);
		if (!PAID_KEEPS.some((k) => k in set)) return;
		if (before) {
			if (before.status === "PAID") throw conflict(`invoice ${before.id} is already paid`);
			return;
		}
		const paid = await (ctx.service as unknown as Svc).collectionStore("invoices").count({ $and: [requirePlan(ctx.locals).filter, { status: "PAID" }] });
		if (paid) throw conflict("a paid invoice keeps its status, amount and currency");
	},
	specials: {
		/**
		 * Pays the invoice from the caller's wallet to its owner's: init + verify; PAID, paid_at, transaction. An
		 * `amount` in the body pins what the payer read: 409 when the invoice says otherwise.
		 */
		async payment(ctx) {
			const svc = ctx.service as unknown as Svc;
			const body = parsePayment(ctx.params.body);
			const invoices = svc.collectionStore("invoices");
			const plan = requirePlan(ctx.locals);
			const invoice = await invoices.findOne(plan.filter);
			if (!invoice) throw notFound();
			// The payment reads the invoice's status, amount and currency: all in the payer's view, or 403.
			refuseHiddenUse(plan, { action: "payment", grant: "payment", object: "financial:invoices", fields: PAID_KEEPS });
			assertPayable(invoice, body.amount);
			const amount = invoice.amount;
			if (!isAmount(amount)) throw badRequest("the invoice amount must be a positive integer");
			const payee = await userWallet(svc.collectionStore("wallets"), invoice.owner as string);
			if (!payee) throw conflict("the invoice's owner has no wallet");
			// Claimed first (compare-and-set on what the payment depends on): two payments of one invoice never both pay,
			// and an invoice changed since it was read is not paid at the old terms.
			const claimed = await invoices.updateIf(
				{ id: invoice.id, status: same(invoice.status), amount, currency: same(invoice.currency), deleted_at: null },
				{ $set: { status: "PAID" } },
			);
			if (!claimed) {
				const now = await invoices.findOne({ id: invoice.id, deleted_at: null });
				if (!now) throw notFound();
				assertPayable(now, body.amount);
				throw conflict(`invoice ${invoice.id} changed while it was being paid`);
			}
			let tx: StoredDoc;
			try {
				const b = parseInit({
					amount,
					...(invoice.currency ? { currency: invoice.currency } : {}),
					payers: [{ wallet: body.wallet, amount }],
					payees: [{ wallet: payee.id, amount }],
				});
				tx = await initTransaction(svc, ctx, b, "payment");
				tx = await finishTransaction(svc, ctx, tx, "commit");
			} catch (err) {
				await invoices.updateIf({ id: invoice.id, status: "PAID" }, invoice.status === undefined ? { $unset: { status: true } } : { $set: { status: invoice.status } });
				// On PostgreSQL the claim is committed already (at the first call above) and the unit of work would roll this
				// undo back with the error: it is committed now, or the invoice would stay PAID, unpaid.
				await flushUnit();
				throw err;
			}
			const now = new Date().toISOString();
			const after = (await invoices.updateIf({ id: invoice.id }, { $set: { status: "PAID", paid_at: now, transaction: tx.id, updated_at: now } }))!;
			await svc.recordChanges(ctx, "invoices", [{ op: "u", before: invoice, after }]);
			return { data: present(INVOICES, after, plan.fields) };
		},
	},
};
