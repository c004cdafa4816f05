/**
 * Whose wallet is whose (docs/contracts.md "Financial transactions and payments", "Tenants").
 *
 * - Every user gets one wallet made by the platform, whose id follows from the user's (`walletIdOf`). That wallet,
 *   and no other wallet that merely names the user in `user`, is the user's: payments credit it, `ensureWallet`
 *   looks for it.
 * - `user` names a user of the caller's tenant, like `shares` (400 otherwise), on create, bulk create, patch and bulk
 *   patch.
 * - A wallet holding money, or with balance moves of a saga in flight, keeps its currency (409): relabelling it would
 *   turn one currency into another.
 * - A wallet that takes part in a pending transaction (either side), has balance moves in flight, or holds money is
 *   neither deleted nor destroyed (409 naming why): its money would leave the ledger with it, and a saga's undo of
 *   the destroy would bring back a balance the ledger may have moved past (the transfer's abort refunding the payer).
 *   The check reads `balance`, so the caller's grant must let it read it (403 otherwise, as for a transaction).
 * - A wallet a transaction touches is in the caller's view (`assertInView`, ../caller-view.ts): the collection's own
 *   authorized read, 404 otherwise, as for a GET; what the transaction uses of it (a payer's `balance` and
 *   `currency`, a payee's `currency`) is in that view's field list, 403 otherwise (./transactions.ts).
 */
import { badRequest, conflict } from "../../lib/errors";
import { assertInView, refuseHiddenUse } from "../caller-view";
import { sha256Hex } from "../../lib/crypto";
import { requirePlan } from "../../lib/plan";
import type { TokenClaims } from "../../lib/types";
import { USERS_OUTSIDE_TENANT, type CollectionHooks, type Ctx } from "../../engine/collection.mixin";
import type { DocumentStore, StoredDoc } from "../../stores";

/**
 * A wallet's id follows from its user's: two deliveries of one creation (two nodes, a replay) insert the same id,
 * and the second is a duplicate-key no-op, so there is one wallet per user even under a race.
 */
export function walletIdOf(user: string): string {
	return sha256Hex(`wallet:${user}`).slice(0, 24);
}

/** The user's own wallet (the platform's), live; never another wallet naming the user. */
export function userWallet(wallets: DocumentStore, user: string): Promise<StoredDoc | null> {
	return wallets.findOne({ id: walletIdOf(user), user, deleted_at: null });
}

function tenantsOf(token: TokenClaims): string[] {
	return [token.cid, ...(token.coworker ? token.coworker.split(" ") : [])].filter(Boolean);
}

/** 400 unless `user` (when given) is a live user of the caller's tenant (not one of its clients). */
async function assertTenantUser(ctx: Ctx, user: unknown): Promise<void> {
	if (user === undefined || user === null) return;
	const id = String(user).toLowerCase();
	const token = requirePlan(ctx.locals).token;
	const known = await ctx.call("identity.users.byId", { id });
	const { outside } = known
		? await ctx.call<{ outside: string[] }, { tenants: string[]; uid?: string; ids: string[] }>(USERS_OUTSIDE_TENANT, { tenants: tenantsOf(token), uid: token.uid, ids: [id] })
		: { outside: [id] };
	if (outside.length) throw badRequest(`user: ${String(user)} is not a user of this tenant`);
}

const storeOf = (ctx: Ctx, name: string) => (ctx.service as unknown as { collectionStore(n: string): DocumentStore }).collectionStore(name);

const HOLDING = { $or: [{ balance: { $gt: 0 } }, { "saga_ops.0": { $exists: true } }] };

/** 409 when the patch would change the currency of a wallet that holds money or has moves in flight. */
async function assertCurrencyKept(ctx: Ctx, set: Record<string, unknown>, before: StoredDoc | null): Promise<void> {
	if (!("currency" in set)) return;
	if (before) {
		const holds = ((before.balance as number | undefined) ?? 0) > 0 || ((before.saga_ops as unknown[] | undefined)?.length ?? 0) > 0;
		if (holds && before.currency !== set.currency) throw conflict(`wallet ${before.id} holds a balance: its currency cannot change`);
		return;
	}
	const held = await storeOf(ctx, "wallets").count({ $and: [requirePlan(ctx.locals).filter, { currency: { $ne: set.currency ?? null } }, HOLDING] });
	if (held) throw conflict("a wallet of the patch holds a balance: its currency cannot change");
}

/** Whether the caller can GET the transaction (any zone): only then is it named in a refusal. */
async function canRead(ctx: Ctx, id: string): Promise<boolean> {
	return assertInView(ctx, "financial.transactions", id, "transaction").then(
		() => true,
		() => false,
	);
}

/**
 * 409 unless the wallet is empty and out of every transaction: no pending transaction names it (payer or payee), no
 * balance move of a saga is in flight on it (a transfer between its moves and its record: a tag whose saga has no
 * transaction yet), and its balance is zero.
 */
async function assertRemovable(ctx: Ctx, w: StoredDoc, op: "remove" | "destroy"): Promise<void> {
	const [verb, grant] = op === "remove" ? ["delete", "write"] : ["destroy", "manage"];
	refuseHiddenUse(requirePlan(ctx.locals), { action: verb, grant, object: "financial:wallets", fields: ["balance"] });
	const txs = storeOf(ctx, "transactions");
	const [pending] = await txs.find({ query: { state: "PENDING", $or: [{ "payers.wallet": w.id }, { "payees.wallet": w.id }] }, sort: { id: 1 }, limit: 1 });
	if (pending) throw conflict(`wallet ${w.id} takes part in ${(await canRead(ctx, pending.id)) ? `pending transaction ${pending.id}` : "a pending transaction"}`);
	const sagas = [...new Set(((w.saga_ops as string[] | undefined) ?? []).map((op) => op.split(":")[0]))];
	if (sagas.length) {
		const recorded = new Set((await txs.find({ query: { saga: { $in: sagas } } })).map((t) => t.saga));
		if (sagas.some((s) => !recorded.has(s))) throw conflict(`wallet ${w.id} has balance moves in flight; try again once they settle`);
	}
	const balance = (w.balance as number | undefined) ?? 0;
	if (balance !== 0) throw conflict(`wallet ${w.id} holds a balance of ${balance}; move it out before ${verb === "delete" ? "deleting" : "destroying"} the wallet`);
}

export const walletHooks: CollectionHooks = {
	async beforeCreate(ctx, doc) {
		await assertTenantUser(ctx, doc.user);
	},
	async beforePatch(ctx, set, before) {
		if ("user" in set) await assertTenantUser(ctx, set.user);
		await assertCurrencyKept(ctx, set, before);
	},
	beforeRemove: assertRemovable,
};
