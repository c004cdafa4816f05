/** What every kind of operation builds on: the answer envelopes, OpParts, and the generic operation of a route no kind describes. */
import type { RouteDef } from "../routes";
import { json, type Schema } from "./common";

export const envelope = {
	data: (s: Schema): Schema => ({ type: "object", required: ["data"], properties: { data: s } }),
	items: (s: Schema): Schema => ({ type: "object", required: ["items", "total"], properties: { items: { type: "array", items: s }, total: { type: "integer", minimum: 0 } } }),
	total: (): Schema => ({ type: "object", required: ["total"], properties: { total: { type: "integer", minimum: 0 } } }),
	result: (values: string[]): Schema => ({ type: "object", required: ["result"], properties: { result: { type: "string", enum: values } } }),
};

export const CURSOR_FRAMES =
	"Server-sent events (send `Accept: text/event-stream`). One frame per document: `id: <id>\\ndata: <json document>\\n\\n`; " +
	"after the last one `event: end\\ndata: close\\n\\n`. A failure mid-stream sends `event: error\\ndata: <error body>\\n\\n` " +
	"(the Error schema). Honours `query`, `pagination`, `projection` and `populate` like the list. " +
	"A reconnect with header `Last-Event-ID: <id>` (an EventSource sends it by itself) resumes after that document. " +
	"An EventSource reconnects whenever a stream ends: close it on `event: end`.";

export const ok = (description: string, schema: Schema) => ({ "200": { description, content: json(schema) } });
export const ETAG_HEADER = {
	ETag: { description: "The document's entity tag (changes with every change of the document): send it in `If-Match` or `If-None-Match`", schema: { type: "string" } },
};
/** An answer carrying the document's `ETag` (by-id reads and writes). */
export const tagged = (description: string, schema: Schema) => ({ "200": { description, headers: ETAG_HEADER, content: json(schema) } });

export interface OpParts {
	description?: string;
	parameters?: string[];
	requestBody?: Schema;
	responses: Record<string, Schema>;
	errors: number[];
	/** An error whose meaning on this route differs from the shared response's (401 on /auth/token). */
	errorOverrides?: Record<number, Schema>;
	/** Parameters of this operation only (a special's own query parameters). */
	inlineParameters?: Schema[];
	/** Security requirements of a public operation that accepts credentials of its own (the token endpoint). */
	security?: Schema[];
}

/** A route the table may gain later (a special action) still gets a truthful, if less precise, description. */
export function genericOp(r: RouteDef): OpParts {
	const hasBody = r.method === "POST" || r.method === "PUT" || r.method === "PATCH";
	return {
		requestBody: hasBody ? { required: false, content: json({ type: "object" }) } : undefined,
		responses: ok("Result of the operation", {}),
		errors: [400, 401, ...(r.public ? [] : [403]), ...(r.path.includes("/:") ? [404] : []), ...(hasBody ? [413] : [])],
	};
}
