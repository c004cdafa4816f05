/** Change events in the spec's webhook format. Secret and write-only fields are stripped by `present`. */
import type { CollectionDef, DomainDef } from "../catalog";
import type { StoredDoc } from "../catalog/store";
import { present } from "./present";
import type { Doc } from "./types";

export type ChangeOp = "c" | "u" | "d" | "r";

export interface ChangeEvent {
	id: string;
	ts_ms: number;
	op: ChangeOp;
	topic: string;
	source: { name: string; db: string; collection: string };
	after?: Doc;
	before?: Doc;
}

export const SOURCE_NAME = "platform";

export function changeEvent(op: ChangeOp, domain: DomainDef, col: CollectionDef, before: StoredDoc | null, after: StoredDoc | null, ts = Date.now()): ChangeEvent {
	const ev: ChangeEvent = {
		id: (after ?? before)!.id,
		ts_ms: ts,
		op,
		topic: `${domain.name}.${col.name}`,
		source: { name: SOURCE_NAME, db: domain.name, collection: col.name },
	};
	// Delete (soft or destroy) carries no `after`; create carries no `before`.
	if (after && op !== "d") ev.after = present(col, after);
	if (before && op !== "c") ev.before = present(col, before);
	return ev;
}
