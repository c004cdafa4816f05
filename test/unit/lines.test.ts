/**
 * runtime/lines.ts: JSON lines split at "\n" only. Node 24's readline also ends lines at U+2028 and U+2029, which
 * JSON.stringify leaves unescaped inside strings; a backup or NeDB file holding one must still read as one line.
 */
import { Readable } from "stream";
import { textLines } from "../../runtime/lines";

const read = async (chunks: Array<string | Buffer>) => {
	const out: string[] = [];
	for await (const l of textLines(Readable.from(chunks))) out.push(l);
	return out;
};

test("U+2028 and U+2029 inside a JSON string stay in their line", async () => {
	const doc = { text: "a\u2028b\u2029c", n: 1 };
	const lines = await read([`${JSON.stringify(doc)}\n{"b":2}\n`]);
	expect(lines).toEqual([JSON.stringify(doc), '{"b":2}']);
	expect(JSON.parse(lines[0])).toEqual(doc);
});

test("lines across chunks, a character split between two Buffers, CRLF, and a last line without a newline", async () => {
	const text = "first 😀 line\r\nsecond\n\nlast";
	const bytes = Buffer.from(text, "utf8");
	// Split inside the emoji's four bytes and inside "\r\n".
	const cut1 = bytes.indexOf(Buffer.from("😀")) + 2;
	const cut2 = bytes.indexOf(Buffer.from("\r\n")) + 1;
	expect(await read([bytes.subarray(0, cut1), bytes.subarray(cut1, cut2), bytes.subarray(cut2)])).toEqual(["first 😀 line", "second", "", "last"]);
});

test("no trailing empty line after a final newline; an empty stream has no lines", async () => {
	expect(await read(["a\nb\n"])).toEqual(["a", "b"]);
	expect(await read([])).toEqual([]);
});

test("a long line in many small chunks reads whole", async () => {
	const long = "x".repeat(200_000);
	const chunks = long.match(/.{1,1000}/g)!;
	expect(await read([...chunks, "\nend"])).toEqual([long, "end"]);
});
