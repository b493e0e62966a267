const encoder = new TextEncoder();
const decoder = new TextDecoder();

export const bytes = (value: string): Uint8Array => encoder.encode(value);
export const text = (value: Uint8Array): string => decoder.decode(value);
