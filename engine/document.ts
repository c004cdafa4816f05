/**
 * Pure helpers over a collection's documents: a platform-made document, the common `*_at`/`*_by`/`*_in` stamps, the
 * tenant key of a `ref`, the caller's clients and change actor, and the grant-row checks of a write. No I/O.
 */
import { DEFAULT_VERSION } from "../catalog";
import type { ChangeActor } from "../events/outbox";
import { objectId, randomHelper } from "../lib/crypto";
import { forbidden } from "../lib/errors";
import type { AccessPlan } from "../lib/plan";
import { matches } from "../lib/query";
import { referencedFields } from "../lib/query-safety";
import { identityOf, type TokenClaims } from "../lib/types";
import { TENANT_REF, tenantRef, type StoredDoc } from "../stores";
import type { Ctx } from "./collection-contract";

/**
 * A platform-made document (sessions at login, seeded records, wallets): same common fields as a caller's create,
 * stamped with the given identity.
 */
export function platformDoc(fields: Record<string, unknown>, by: { owner: string; cid: string; aid?: string; coworkers?: string[] }): StoredDoc {
	const now = new Date().toISOString();
	const stampOf = (k: string) => ({ [`${k}_at`]: now, [`${k}_by`]: by.owner, [`${k}_in`]: by.aid ?? by.cid });
	return {
		id: objectId(),
		shares: [],
		groups: [],
		version: DEFAULT_VERSION,
		...fields,
		owner: by.owner,
		clients: [...new Set([by.cid, ...(by.coworkers ?? [])])],
		...stampOf("created"),
		...stampOf("updated"),
		deleted_at: null,
		rand: randomHelper(12),
		timestamp: String(Date.now()),
	};
}

export function actorOf(ctx: Ctx): ChangeActor {
	const t = ctx.meta.token;
	return { uid: t?.uid, aid: t?.aid, cid: t?.cid, session: t?.session, ip: ctx.meta.ip };
}

/** `id`/`created_by`-style stamps for one kind of change. */
export function stamp(kind: "created" | "updated" | "deleted" | "restored", token: TokenClaims, now: string): Record<string, unknown> {
	return { [`${kind}_at`]: now, [`${kind}_by`]: identityOf(token), [`${kind}_in`]: token.aid ?? token.cid };
}

/** A write leaves only documents inside the caller's grant rows (plan.writeFilter); 403 before anything is written. */
export function inGrant(plan: AccessPlan, docs: Array<Record<string, unknown>>): void {
	if (!plan.writeFilter) return;
	for (const d of docs) if (!matches(d, plan.writeFilter)) throw forbidden("document is outside the grant filter");
}

/** Whether a `$set` changes a field the filter names (documents read through the filter match it already). */
export function touches(filter: Record<string, unknown>, set: Record<string, unknown>): boolean {
	const tops = new Set(referencedFields(filter).map((f) => f.split(".")[0]));
	return Object.keys(set).some((k) => tops.has(k));
}

/** Keeps a new document's `tenant_ref` in step with its `ref` (right before insert: hooks may have changed either). */
export function keyRef(doc: StoredDoc): StoredDoc {
	const k = tenantRef(doc.clients, doc.ref);
	if (k === null) delete doc[TENANT_REF];
	else doc[TENANT_REF] = k;
	return doc;
}

export function clientsOf(token: TokenClaims): string[] {
	const list = [token.cid, ...(token.coworker ? token.coworker.split(" ") : [])].filter(Boolean);
	return [...new Set(list)];
}
