/**
 * Who a change can concern (services/api/live-cursor.ts): subscribers are indexed by zone keys (own and share:
 * `u:<identity>`; group: `g:<tenant>/<group>`; client: `c:<client>`), and a change looks up the keys of its document
 * before and after, so its cost grows with the subscribers it can concern, not with all of them.
 */
import type { OutboxRecord } from "../../events/outbox";
import { identityOf, type TokenClaims } from "../../lib/types";

/** Zone keys of a document image: who can have it in view (a superset: the view decides). */
export function docKeys(d: Record<string, unknown> | undefined, into: Set<string>): void {
	if (!d) return;
	if (typeof d.owner === "string") into.add(`u:${d.owner}`);
	if (Array.isArray(d.shares)) for (const s of d.shares) if (typeof s === "string") into.add(`u:${s}`);
	const clients = Array.isArray(d.clients) ? d.clients.filter((c): c is string => typeof c === "string") : [];
	for (const c of clients) into.add(`c:${c}`);
	if (clients.length && Array.isArray(d.groups)) for (const g of d.groups) if (typeof g === "string") into.add(`g:${clients[0]}/${g}`);
}

/** The zone keys of a record's document, before and after its change. */
export function recordKeys(rec: OutboxRecord): Set<string> {
	const keys = new Set<string>();
	docKeys(rec.event.before, keys);
	docKeys(rec.event.after, keys);
	return keys;
}

/** Zone keys of a subscriber: the zones its view is made of (lib/zones.ts zoneFilter, in index form). */
export function subKeys(zones: string[], token: TokenClaims): string[] {
	const keys = new Set<string>();
	for (const z of zones) {
		if (z === "own" || z === "share") keys.add(`u:${identityOf(token)}`);
		else if (z === "client" && token.cid) keys.add(`c:${token.cid}`);
		else if (z === "group" && token.cid) for (const g of token.groups ?? []) keys.add(`g:${token.cid}/${g}`);
	}
	return [...keys];
}
