/**
 * What special actions check against the caller's view (docs/security.md, "Special actions and field lists"): a
 * special action may neither return nor use a field outside the caller's view, and every id its body names is in
 * that view.
 *
 * - `refuseHiddenUse`: the action uses fields of a collection (a debit reads the payer's `balance`, a distance the
 *   location's `lat`/`lng`): 403 naming those the caller's grant hides, before anything is read or changed.
 * - `assertInView`: an id the body names is one the caller can GET (the collection's own authorized `get`, as the
 *   caller, in every zone): 404 `<noun> <id> not found` otherwise, as for a foreign id.
 */
import { forbidden, notFound } from "../lib/errors";
import { fieldsAllowed } from "../lib/grants";
import type { AccessPlan } from "../lib/plan";
import type { Context } from "moleculer";

/** Which fields an action uses, of which collection, through which grant of the caller. */
export interface FieldUse {
	/** The special action (`payment`, `init`, `resolve`): the subject of the message. */
	action: string;
	/** The grant whose field list is checked (`read`, `write`, the special's own action). */
	grant: string;
	/** `<service>:<collection>` */
	object: string;
	fields: readonly string[];
}

const listed = (names: string[]) => (names.length === 1 ? names[0] : `${names.slice(0, -1).join(", ")} and ${names[names.length - 1]}`);

/**
 * 403 `<action> uses <fields>, which your <grant> grant on <object> does not let you read` when the view's field list
 * (the grant's allowlist) leaves out a field the action uses. Checked before the action reads or changes anything, so
 * neither its answer nor its outcome (a 409 on a balance, the nearest of several points) depends on a hidden value.
 */
export function refuseHiddenUse(view: Pick<AccessPlan, "fields">, use: FieldUse): void {
	const hidden = fieldsAllowed([...use.fields], view.fields);
	if (hidden.length) throw forbidden(`${use.action} uses ${listed(hidden)}, which your ${use.grant} grant on ${use.object} does not let you read`);
}

/** Every zone: a document the caller can GET in any of them is in its view. */
const ANY_ZONE = "own,share,group,client";

/**
 * 404 `<noun> <id> not found` unless the caller can GET `<service>.<collection>` `id` (scope, grant, row filter,
 * zones: the collection's `get` action itself, asked in every zone, without the request's other headers). Other
 * refusals (403 for want of a scope or grant) pass through.
 */
export async function assertInView(ctx: Pick<Context, "call">, target: string, id: string, noun: string): Promise<void> {
	try {
		await ctx.call(`${target}.get`, { params: { id } }, { meta: { headers: { "x-zone": ANY_ZONE } } });
	} catch (err) {
		if ((err as { code?: number }).code === 404) throw notFound(`${noun} ${id} not found`);
		throw err;
	}
}
