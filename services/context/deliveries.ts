/**
 * context/configs `deliveries` and `redeliver` (docs/webhooks.md, "Deliveries over the API"): the dispatcher's
 * deliveries of one CQRS config, and the replay of one of them, over the public API.
 *
 * Who sees what: the authority layer has decided the scope and grant (`read` on context:configs to list, `write` to
 * redeliver: a redeliver re-enables the config, which a write of the config can do too). The config is then looked up
 * as GET /context/configs/:id would find it (the caller's view: zones, the grant's rows), and must be the caller's own
 * client's (`eid`): a config of another tenant shared with the caller shows no deliveries of that tenant. The operator
 * (a token of the root client) finds any tenant's config by id (still within its grant's rows). Anything else is
 * 404 `document not found`, as for GET: the answer does not tell whether another tenant's config exists.
 * The dispatcher's record is shown without its payload (the change event: a document), its URL (which may hold a
 * token in its query) or its lease (lib/contracts.ts DeliveryView).
 */
import { CONFIG_DELIVERIES_ACTION, REPLAY_ACTION, type DeliveryView, type Page } from "../../lib/contracts";
import { deliveryView, type DeliveryRecord } from "../../lib/deliveries";
import { badRequest, notFound } from "../../lib/errors";
import { requirePlan } from "../../lib/plan";
import { isPlainObject } from "../../lib/validate";
import { and, checkGrant } from "../../authority/authority";
import { grantCache } from "../../authority/grant-cache";
import type { Ctx } from "../../engine/collection.mixin";
import type { StoredDoc } from "../../stores";
import { callerClient } from "../domain.service";

const STATUSES = ["pending", "delivered", "failed", "disabled"] as const;
/** A delivery id: the dispatcher's bigserial. */
const DELIVERY_ID = /^\d{1,18}$/;
export const DELIVERIES_PAGE = 20;
export const PAGE_MAX = 100;

/** The config the request addresses, as the caller may see it; 404 otherwise. */
async function addressedConfig(ctx: Ctx, action: "read" | "write"): Promise<{ id: string; eid: string }> {
	const plan = requirePlan(ctx.locals);
	const store = (ctx.service as unknown as { collectionStore(n: string): { findOne(f: unknown): Promise<StoredDoc | null> } }).collectionStore("configs");
	const id = String(ctx.params.params?.id ?? "").toLowerCase();
	const operator = (await callerClient(ctx as never))?.operator === true;
	// The operator's view of another tenant's config: the grant's rows and the id, without the zones (its own documents).
	const filter = operator ? and([{ deleted_at: null }, checkGrant(await grantCache.get(ctx), plan.token, action, "context:configs", ctx.meta.ip).rowFilter, { id }]) : plan.filter;
	const doc = await store.findOne(filter);
	if (!doc || typeof doc.eid !== "string" || (!operator && doc.eid !== plan.token.cid)) throw notFound();
	return { id: doc.id as string, eid: doc.eid };
}

/** A query parameter given once, as a string; 400 naming it otherwise. */
function single(q: Record<string, unknown>, name: string): string | undefined {
	const v = q[name];
	if (v === undefined) return undefined;
	if (typeof v !== "string") throw badRequest(`${name} must be given once, as a string`);
	return v;
}

/** `limit`: an integer from 1 to PAGE_MAX (`fallback` when absent). */
export function pageLimit(q: Record<string, unknown>, fallback: number): number {
	const v = single(q, "limit");
	if (v === undefined) return fallback;
	if (!/^\d{1,3}$/.test(v) || Number(v) < 1 || Number(v) > PAGE_MAX) throw badRequest(`limit must be an integer from 1 to ${PAGE_MAX}`);
	return Number(v);
}

/** `before`: an id of the listing's (digits), the previous page's `next`. */
export function pageBefore(q: Record<string, unknown>, what: string): string | undefined {
	const v = single(q, "before");
	if (v !== undefined && !DELIVERY_ID.test(v)) throw badRequest(`before must be ${what} id (digits): the previous page's next`);
	return v;
}

export { single as queryValue };

/** GET /context/configs/:id/deliveries. */
export async function deliveries(ctx: Ctx): Promise<Page<DeliveryView>> {
	const config = await addressedConfig(ctx, "read");
	const q = isPlainObject(ctx.params.query) ? ctx.params.query : {};
	const status = single(q, "status");
	if (status !== undefined && !(STATUSES as readonly string[]).includes(status)) throw badRequest(`status must be one of ${STATUSES.join(", ")}`);
	return ctx.call(CONFIG_DELIVERIES_ACTION, {
		config_id: config.id,
		client_id: config.eid,
		...(status !== undefined ? { status } : {}),
		...(q.before !== undefined ? { before: pageBefore(q, "a delivery") } : {}),
		limit: pageLimit(q, DELIVERIES_PAGE),
	});
}

/** POST /context/configs/:id/deliveries/:delivery/redeliver. */
export async function redeliver(ctx: Ctx): Promise<{ data: DeliveryView }> {
	const body = ctx.params.body;
	if (body !== undefined && (!isPlainObject(body) || Object.keys(body).length)) throw badRequest("redeliver takes no body: the path names the delivery");
	const config = await addressedConfig(ctx, "write");
	const delivery = String((ctx.params.params as { delivery?: unknown } | undefined)?.delivery ?? "");
	if (!DELIVERY_ID.test(delivery)) throw notFound("delivery not found: a delivery id is digits");
	let replayed: { deliveries: DeliveryRecord[] };
	try {
		replayed = await ctx.call(REPLAY_ACTION, { id: delivery, client_id: config.eid, config_id: config.id });
	} catch (err) {
		// The dispatcher's 404 names no tenant: a delivery of another config or client is not found, like none.
		if ((err as { code?: unknown }).code === 404) throw notFound(`delivery ${delivery} not found`);
		throw err;
	}
	return { data: deliveryView(replayed.deliveries[0]) };
}
