/** Stored secrets move to today's hash parameters at the next successful login (docs/security.md, "Password hashing"). */
import type { DocumentStore } from "../catalog/store";
import { hashSecret, needsRehash } from "./password-hash";

/**
 * Replaces `field` of document `id`, a hash of `plain` just verified, by one made with today's parameters when the
 * stored one is weaker. Compare-and-set on the old hash: a secret changed meanwhile is never overwritten by the old
 * one's rehash. Not a change of the document (same secret): no change event, no `updated_at`, sessions stay open.
 * Best effort: false, never an error, when it did not happen (the login it follows succeeds either way).
 */
export async function rehashIfWeak(store: Pick<DocumentStore, "updateIf">, id: string, field: string, plain: string, stored: string): Promise<boolean> {
	if (!needsRehash(stored)) return false;
	try {
		return !!(await store.updateIf({ id, [field]: stored }, { $set: { [field]: await hashSecret(plain) } }));
	} catch {
		return false;
	}
}
