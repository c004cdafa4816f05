/**
 * general/activities `audit` (docs/api.md, "The audit trail"): the platform's audit trail (the logger's entries: one
 * per request a gateway answered, one per document changed) over the public API, newest first.
 *
 * Who sees what: the authority layer has decided scope `read:general:activities` and a `read` grant on
 * general:activities (the spec's audit log entries). The entries are not activity documents, so a grant's row filter
 * or field list, which speak of activities' fields, cannot narrow them: a caller holding only such grants is refused
 * (403) rather than shown more than they say. A tenant's caller sees its own client's entries (`cid`: what came
 * through its client); the operator (a token of the root client) every tenant's, and may narrow them by `client`.
 * An entry never shows its session id.
 */
import { AUDIT_ENTRIES_ACTION, type AuditFilter, type AuditView, type Page } from "../../lib/contracts";
import { badRequest, forbidden } from "../../lib/errors";
import { requirePlan } from "../../lib/plan";
import { isPlainObject } from "../../lib/validate";
import { checkGrant } from "../../authority/authority";
import { grantCache } from "../../authority/grant-cache";
import type { Ctx } from "../../engine/collection.mixin";
import { callerClient } from "../domain.service";
import { pageBefore, pageLimit, queryValue } from "../context/deliveries";

export const AUDIT_PAGE = 50;

/** A bounded text filter; 400 naming it otherwise. */
function text(q: Record<string, unknown>, name: string, max: number): string | undefined {
	const v = queryValue(q, name);
	if (v !== undefined && (!v || v.length > max)) throw badRequest(`${name} must be 1 to ${max} characters`);
	return v;
}

/** An instant (ISO 8601), as the store compares it. */
function instant(q: Record<string, unknown>, name: string): string | undefined {
	const v = queryValue(q, name);
	if (v === undefined) return undefined;
	const ms = /^\d{4}-\d{2}-\d{2}/.test(v) ? Date.parse(v) : NaN;
	if (Number.isNaN(ms)) throw badRequest(`${name} must be a date and time in ISO 8601 (2026-01-31T12:00:00Z)`);
	return new Date(ms).toISOString();
}

/** The filters of the request's query (every one optional); 400 for a malformed one. */
export function auditFilter(query: unknown): AuditFilter {
	const q = isPlainObject(query) ? query : {};
	const kind = queryValue(q, "kind");
	if (kind !== undefined && kind !== "request" && kind !== "change") throw badRequest("kind must be request or change");
	const status = queryValue(q, "status");
	if (status !== undefined && !/^[1-5]\d\d$/.test(status)) throw badRequest("status must be an HTTP status (100 to 599)");
	const from = instant(q, "from");
	const to = instant(q, "to");
	if (from && to && from > to) throw badRequest("from must not be after to");
	const f: AuditFilter = {
		from,
		to,
		kind,
		path: text(q, "path", 2000),
		action: text(q, "action", 200),
		uid: text(q, "user", 200),
		cid: text(q, "client", 200),
		status: status === undefined ? undefined : Number(status),
		before: pageBefore(q, "an entry"),
		limit: pageLimit(q, AUDIT_PAGE),
	};
	return Object.fromEntries(Object.entries(f).filter(([, v]) => v !== undefined)) as unknown as AuditFilter;
}

/** GET /general/activities/audit. */
export async function audit(ctx: Ctx): Promise<Page<AuditView>> {
	const token = requirePlan(ctx.locals).token;
	const decision = checkGrant(await grantCache.get(ctx), token, "read", "general:activities", ctx.meta.ip);
	if (decision.rowFilter || decision.fields)
		throw forbidden("the audit trail needs a read grant on general:activities without filter or field list: its entries are not activity documents");
	const filter = auditFilter(ctx.params.query);
	const operator = (await callerClient(ctx as never))?.operator === true;
	if (!operator) {
		// A tenant's entries only: another client named here matches nothing (it does not tell whether it exists).
		if (!token.cid || (filter.cid !== undefined && filter.cid !== token.cid)) return { items: [], next: null };
		filter.cid = token.cid;
	}
	return ctx.call(AUDIT_ENTRIES_ACTION, filter);
}
