// Strict fakes for unit tests: an object with only the members a test sets up; touching any other
// member fails the test at once (a fake that silently answers undefined hides what the code does).
export function strictFake<T extends object>(name: string, members: Partial<T>): T {
  return new Proxy(members as T, {
    get(target, property, receiver) {
      if (property in target) return Reflect.get(target, property, receiver);
      // Probes by the runtime and jest (thenables, matchers, printing) are not calls of the code under test.
      if (typeof property === 'symbol' || property === 'then' || property === 'asymmetricMatch' || property === 'toJSON') return undefined;
      throw new Error(`${name}.${String(property)} was not set up in this test`);
    },
  });
}
