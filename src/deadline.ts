// A promise with a time limit: the work's own result when it comes in time, else the error `late`
// makes (each caller says what being late means to it: a timeout code, a host out of reach, …).
export function withDeadline<T>(work: Promise<T>, ms: number, late: () => Error): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    work.finally(() => clearTimeout(timer)),
    new Promise<T>((_, reject) => {
      timer = setTimeout(() => reject(late()), ms);
    }),
  ]);
}
