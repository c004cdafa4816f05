/** How a stored document leaves the platform: `id` first, write-only fields never leave, allowlists apply. */
import type { CollectionDef } from "../catalog";
import { REV, TENANT_REF, type StoredDoc } from "../catalog/store";
import type { Doc } from "./types";

const writeOnlyCache = new WeakMap<CollectionDef, string[]>();

export function writeOnlyFields(col: CollectionDef): string[] {
	let w = writeOnlyCache.get(col);
	// Plus the engine's own keys (the per-tenant `ref` key, the revision), which no catalog declares.
	if (!w)
		writeOnlyCache.set(
			col,
			(w = [
				...Object.entries(col.fields)
					.filter(([, f]) => f.writeOnly || f.internal)
					.map(([k]) => k),
				TENANT_REF,
				REV,
			]),
		);
	return w;
}

/** `fields` null means every field; otherwise only those (and `id`). */
export function present(col: CollectionDef, stored: StoredDoc, fields: readonly string[] | null = null): Doc {
	const out: Record<string, unknown> = { id: stored.id };
	const hidden = writeOnlyFields(col);
	if (fields) {
		for (const f of fields) if (f !== "id" && f in stored && !hidden.includes(f)) out[f] = stored[f];
		return out as Doc;
	}
	for (const k in stored) if (k !== "id" && !hidden.includes(k)) out[k] = stored[k];
	return out as Doc;
}
