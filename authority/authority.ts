/**
 * The authority layer: one Moleculer middleware around every collection action (and every special action that
 * declares `authority`). In the spec's order: scope, grant, then query enforcement, producing the access plan the
 * collection engine executes. Nothing reads or writes collection data without passing here. The decisions themselves
 * are pure (lib/authority.ts); this file takes their inputs from the call's context and keeps the plan in it.
 */
import type { Middleware } from "moleculer";
import type { CollectionActionMeta, CollectionParams, Ctx, SpecialActionMeta } from "../engine/collection.mixin";
import { findCollection, type CollectionDef } from "../catalog";
import { checkGrant, checkScope, enforce as enforceRequest, type EnforceRequest } from "../lib/authority";
import { ApiError, notFound, unauthorized } from "../lib/errors";
import type { Decision, GrantIndex } from "../lib/grants";
import type { AccessPlan } from "../lib/plan";
import type { TokenClaims } from "../lib/types";
import { grantCache } from "./grant-cache";

export { and, checkGrant, checkScope, subjectsOf, type EnforceRequest } from "../lib/authority";

/** What query enforcement reads of a collection call: its parameters, and the request's headers and address. */
function requestOf(ctx: Ctx): EnforceRequest {
	return { query: ctx.params.query, id: ctx.params.params?.id, body: ctx.params.body, headers: ctx.meta.headers, ip: ctx.meta.ip };
}

/** Layer 3 on a collection call (lib/authority.ts `enforce`): the plan for the call's parameters and headers. */
export function enforce(ctx: Ctx, index: GrantIndex, col: CollectionDef, meta: CollectionActionMeta, decision: Decision, token: TokenClaims): AccessPlan {
	return enforceRequest(requestOf(ctx), index, col, meta.op, decision, token);
}

/**
 * The caller's view of one collection for a special action: scope `<action>:<service>:<collection>`, a grant for
 * that action, then the plan (zones + the grant's row filter, and `id` when given). Also used by handlers that
 * address documents of another collection (a payer's wallet: `write` on financial:wallets).
 */
export async function callerView(ctx: Ctx, service: string, collection: string, action: string, id?: string): Promise<AccessPlan> {
	const ref = findCollection(service, collection);
	if (!ref) throw notFound();
	const token = ctx.meta.token;
	if (!token) throw new ApiError(502, "authorization layers were not applied");
	if (token.type !== "access") throw unauthorized();
	checkScope(token, action, service, collection);
	const index = grantCache.loaded() ?? (await grantCache.get(ctx));
	const decision = checkGrant(index, token, action, `${service}:${collection}`, ctx.meta.ip);
	// By id, of the request's query only its zone counts (`?zone=`, as for GET; the header `x-zone` is in ctx.meta).
	const zone = ctx.params.query?.zone;
	const query = id !== undefined ? (zone !== undefined ? { zone } : {}) : ctx.params.query;
	return enforceRequest({ query, id, headers: ctx.meta.headers, ip: ctx.meta.ip }, index, ref.collection, id !== undefined ? "get" : "count", decision, token);
}

/**
 * `ctx.meta[DECIDE_ONLY]`: the call asks for the authority decision only (the gateway's replay of an Idempotency-Key,
 * services/api/idempotency.ts). The action decides exactly as for the request (scope, grant, query enforcement), then
 * answers `Decided` instead of running its handler. Taken off the call's meta before anything else, so no call the
 * decision makes (the grant snapshot) carries it.
 */
export const DECIDE_ONLY = "$decideOnly";

/** What an action asked for its decision only answers: the plan's response fields (null: every field). */
export interface Decided {
	decided: true;
	fields: string[] | null;
}

function takeDecideOnly(ctx: Ctx): boolean {
	const only = ctx.meta[DECIDE_ONLY] === true;
	if (only) delete ctx.meta[DECIDE_ONLY];
	return only;
}

const decided = (plan: AccessPlan): Decided => ({ decided: true, fields: plan.fields ?? null });

export const AuthorityMiddleware = {
	name: "Authority",
	localAction(handler: (ctx: Ctx) => Promise<unknown>, action: { collection?: CollectionActionMeta; special?: SpecialActionMeta }) {
		const sp = action.special;
		if (sp)
			return async function specialAuthority(ctx: Ctx) {
				const only = takeDecideOnly(ctx);
				ctx.locals.plan = await callerView(ctx, sp.service, sp.collection, sp.action, sp.byId ? (ctx.params.params?.id ?? "") : undefined);
				return only ? decided(ctx.locals.plan) : handler(ctx);
			};
		const meta = action.collection;
		if (!meta) return handler;
		const ref = findCollection(meta.service, meta.collection);
		if (!ref) return handler;
		const object = `${meta.service}:${meta.collection}`;
		return async function authority(ctx: Ctx) {
			const only = takeDecideOnly(ctx);
			const token = ctx.meta.token;
			// Reached without the gateway's authentication: the layers cannot apply.
			if (!token) throw new ApiError(502, "authorization layers were not applied");
			if (token.type !== "access") throw unauthorized();
			checkScope(token, meta.level, meta.service, meta.collection);
			const index = grantCache.loaded() ?? (await grantCache.get(ctx));
			const decision = checkGrant(index, token, meta.level, object, ctx.meta.ip);
			ctx.locals.plan = enforce(ctx, index, ref.collection, meta, decision, token);
			return only ? decided(ctx.locals.plan) : handler(ctx);
		};
	},
} as unknown as Middleware;

export type { CollectionParams };
