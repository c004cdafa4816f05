/** lib/files.ts: sniffing, ranges and the download's content-disposition. */
import { contentDisposition, parseRange, sniffMimetype } from "../../lib/files";

describe("sniffMimetype", () => {
	test("signatures win over the declared type", () => {
		expect(sniffMimetype(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 1]), "text/html")).toBe("image/png");
		expect(sniffMimetype(Buffer.from([0xff, 0xd8, 0xff, 0xe0]), "application/x-msdownload")).toBe("image/jpeg");
		expect(sniffMimetype(Buffer.from("%PDF-1.7\n"), "text/plain")).toBe("application/pdf");
		expect(sniffMimetype(Buffer.concat([Buffer.from("RIFF"), Buffer.alloc(4), Buffer.from("WEBPVP8 ")]))).toBe("image/webp");
		expect(sniffMimetype(Buffer.concat([Buffer.alloc(4), Buffer.from("ftypisom")]))).toBe("video/mp4");
	});
	test("active content declared by the client is served as plain text or bytes", () => {
		expect(sniffMimetype(Buffer.from("<html><script>x</script>"), "text/html")).toBe("text/plain");
		expect(sniffMimetype(Buffer.from("<svg onload=alert(1)>"), "image/svg+xml")).toBe("text/plain");
		expect(sniffMimetype(Buffer.from([0, 1, 2]), "application/javascript")).toBe("application/octet-stream");
		expect(sniffMimetype(Buffer.from([0xc3, 0x28, 0x41, 0x41, 0x41, 0x41]), "text/plain")).toBe("application/octet-stream");
		expect(sniffMimetype(Buffer.alloc(0), "image/png")).toBe("application/octet-stream");
	});
	test("harmless declared text types are kept for text content; a character cut at the boundary is still text", () => {
		expect(sniffMimetype(Buffer.from('{"a":1}'), "application/json; charset=utf-8")).toBe("application/json");
		expect(sniffMimetype(Buffer.from("a,b\n"), "text/csv")).toBe("text/csv");
		expect(sniffMimetype(Buffer.from("héllo wörld".repeat(3)).subarray(0, 30), undefined)).toBe("text/plain");
	});
});

describe("parseRange", () => {
	test("one range of each form; clamped end; unsatisfiable; ignored forms", () => {
		expect(parseRange("bytes=0-9", 100)).toEqual({ kind: "partial", start: 0, end: 9 });
		expect(parseRange("bytes=90-", 100)).toEqual({ kind: "partial", start: 90, end: 99 });
		expect(parseRange("bytes=-10", 100)).toEqual({ kind: "partial", start: 90, end: 99 });
		expect(parseRange("bytes=-1000", 100)).toEqual({ kind: "partial", start: 0, end: 99 });
		expect(parseRange("bytes=50-5000", 100)).toEqual({ kind: "partial", start: 50, end: 99 });
		expect(parseRange("bytes=100-", 100)).toEqual({ kind: "unsatisfiable" });
		expect(parseRange("bytes=-0", 100)).toEqual({ kind: "unsatisfiable" });
		expect(parseRange("bytes=0-0", 0)).toEqual({ kind: "unsatisfiable" });
		for (const h of [undefined, "", "bytes=0-1,5-6", "items=0-1", "bytes=5-2", "bytes=-", "bytes=a-b"]) expect(parseRange(h, 100)).toEqual({ kind: "full" });
	});
});

describe("contentDisposition", () => {
	test("ASCII fallback without quotes, backslashes, percent or controls; exact name in filename*", () => {
		expect(contentDisposition('a"b\\c%d\r\ne.txt', "text/plain")).toBe(`inline; filename="a_b_c_de.txt"; filename*=UTF-8''a%22b%5Cc%25de.txt`);
		expect(contentDisposition("日本.zip", "application/zip")).toBe(`attachment; filename="__.zip"; filename*=UTF-8''%E6%97%A5%E6%9C%AC.zip`);
		expect(contentDisposition("  ", "image/png")).toBe(`inline; filename="file"; filename*=UTF-8''file`);
		expect(contentDisposition("it's (1).bin", "application/octet-stream")).toBe(`attachment; filename="it's (1).bin"; filename*=UTF-8''it%27s%20%281%29.bin`);
	});
});
