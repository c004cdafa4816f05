/**
 * The lines of a text stream (JSON lines: backups, NeDB files), ended by "\n" only; a "\r" before it is dropped, and
 * a last line without "\n" is a line too.
 *
 * Not readline: since Node 24 it also ends a line at U+2028 and U+2029, which JSON text holds unescaped inside strings
 * (JSON.stringify leaves them as they are), so a document holding one would be read as broken lines and a restore
 * would refuse the backup as damaged (test: pgstore-jsonb-migration's backup cases, and test/unit/lines.test.ts).
 */
import type { Readable } from "stream";
import { StringDecoder } from "string_decoder";

export async function* textLines(input: Readable): AsyncGenerator<string> {
	const decoder = new StringDecoder("utf8");
	// The pieces of the line being read: a line may span many chunks, and joining once keeps a long line linear.
	let pending: string[] = [];
	const line = (last: string) => {
		pending.push(last);
		const text = pending.join("");
		pending = [];
		return text.endsWith("\r") ? text.slice(0, -1) : text;
	};
	for await (const chunk of input) {
		const text = typeof chunk === "string" ? chunk : decoder.write(chunk as Buffer);
		let from = 0;
		for (let at = text.indexOf("\n"); at !== -1; at = text.indexOf("\n", from)) {
			yield line(text.slice(from, at));
			from = at + 1;
		}
		if (from < text.length) pending.push(text.slice(from));
	}
	const tail = decoder.end();
	if (tail) pending.push(tail);
	if (pending.length) yield line("");
}
