/**
 * What the public routes show of a webhook delivery (GET /context/configs/:id/deliveries and its redeliver): the
 * dispatcher's record without its payload (the change event: a document), its URL (which may hold a token in its
 * query), its event id, stream position or lease. Dates as ISO 8601 (a record crossing the transporter holds strings).
 */
import type { DeliveryView } from "./contracts";

/** The dispatcher's record as it is read (workers/dispatcher/store.ts DeliveryRow), or as it crossed the transporter. */
export interface DeliveryRecord {
	id: string | number;
	topic: string;
	op: string;
	document_id: string;
	status: DeliveryView["status"];
	attempts: number;
	next_at: Date | string;
	last_status: number | null;
	last_error: string | null;
	created_at: Date | string;
	delivered_at: Date | string | null;
}

const iso = (d: Date | string) => new Date(d).toISOString();

export function deliveryView(r: DeliveryRecord): DeliveryView {
	return {
		id: String(r.id),
		topic: r.topic,
		op: r.op,
		document_id: r.document_id,
		status: r.status,
		attempts: r.attempts,
		next_at: iso(r.next_at),
		last_status: r.last_status,
		last_error: r.last_error,
		created_at: iso(r.created_at),
		delivered_at: r.delivered_at === null ? null : iso(r.delivered_at),
	};
}
