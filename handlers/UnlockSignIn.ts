import type { Handler } from '../src/http/handler';

export const handler: Handler<'UnlockSignIn'> = async ({ auth, services }) => {
  const unlocked = await services.signIn.unlock(auth);
  return {
    status: 200,
    body: {
      object: 'sign_in_unlock',
      unlocked,
      message: unlocked ? 'Password sign-in from unknown browsers is unlocked.' : 'Password sign-in was not locked.',
    },
  };
};
