process.env.KISTE_TEST_DB = 'postgres';
