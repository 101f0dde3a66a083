process.env.KISTE_TEST_DB = 'sqlite';
